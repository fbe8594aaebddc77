"""Whether torch can be imported under this process's address-space limit (`ulimit -v`),
asked before a recording imports it.

Under a limit too low for torch, importing it does not always fail in Python: at 400-425
MB (CPU torch 2.x, a fresh interpreter) a static initializer of `torch._C` throws
`std::bad_alloc`, the C++ runtime calls `terminate`, and `magneton record` died by
SIGABRT (exit 134) with two lines of C++ on stderr. Nothing can catch that in the
process it happens in, so where a limit is set a child tries the import first, holding
as much address space as this process already does (an unused anonymous mapping), and a
failed try is one line naming the limit. Without a limit nothing is tried (no cost).

Torch-free: it runs before anything imports torch.
"""

from __future__ import annotations

import re
import resource
import subprocess
import sys

from magneton.model import MagnetonError

# The child: map what the parent holds beyond the child's own size, then import torch.
_TRY = """
import mmap, re, sys
def size():
    with open("/proc/self/status") as f:
        return int(re.search(r"VmSize:\\s+(\\d+)", f.read()).group(1)) << 10
extra = int(sys.argv[1]) - size()
hold = mmap.mmap(-1, extra, flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ) if extra > 0 else None
import torch
"""
TRY_TIMEOUT_S = 300.0


def address_space_limit() -> int | None:
    """The soft RLIMIT_AS in bytes, None when there is none."""
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    return None if soft in (resource.RLIM_INFINITY, -1) else soft


def _own_size_b() -> int | None:
    try:
        with open("/proc/self/status") as f:
            m = re.search(r"VmSize:\s+(\d+)", f.read())
    except OSError:
        return None
    return int(m.group(1)) << 10 if m else None


# how a failed allocation or mapping reads in the child's stderr
_MEMORY_WORDS = (
    "bad_alloc",
    "failed to map",
    "memoryerror",
    "cannot allocate",
    "out of memory",
    "memory allocation",
)


def _why(stderr: str, returncode: int) -> str | None:
    """What the child's failure says, in a few words (the C++ exception, the loader's
    "failed to map segment", a MemoryError), or None when it was not memory: a torch
    that fails to import for another reason is left to say so itself."""
    lines = [ln.strip() for ln in stderr.splitlines() if ln.strip()]
    said = [ln for ln in lines if any(w in ln.lower() for w in _MEMORY_WORDS)]
    if said:
        last = said[-1]
        mapped = re.search(r"([^\s/:]+): failed to map segment", last)
        if mapped:  # numpy words it "Original error was: /long/path/x.so: failed to map ..."
            return f"{mapped.group(1)}: failed to map segment from shared object"
        return (last.split("what():", 1)[1].strip() if "what():" in last else last)[:160]
    if returncode < 0:  # an abort or a kill with nothing said: the limit, most likely
        return f"killed by signal {-returncode}"
    return None


def check_torch_fits() -> None:
    """Raise a one-line MagnetonError (exit 1) when an address-space limit is set and
    torch cannot be imported under it; nothing when there is no limit, torch is already
    imported, or the process's size cannot be read (not Linux)."""
    limit = address_space_limit()
    if limit is None or "torch" in sys.modules:
        return
    own = _own_size_b()
    if own is None:
        return
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _TRY, str(own)],
            capture_output=True,
            text=True,
            timeout=TRY_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired):
        return  # the try itself could not run: the import says what it says
    why = None if proc.returncode == 0 else _why(proc.stderr, proc.returncode)
    if why is None:
        return
    raise MagnetonError(
        f"ulimit -v allows {limit >> 20} MB of address space, too little to import torch "
        f"for the recording (a trial import under that limit failed: {why}); raise the "
        "limit (ulimit -v) or remove it",
        exit_code=1,
    )
