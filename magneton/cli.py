"""The `magneton` command line.

Each subcommand lives in `magneton/commands/<name>.py` and exposes
`register(subparsers) -> None`, which adds its parser and sets `func=<callable(args)->int>`.
Keeping one file per command lets the stages grow their commands without editing a
shared dispatcher. Errors meant for users are `MagnetonError`s: one line, non-zero exit.

What every command shares is handled here, once, not per command:
- Ctrl-C and SIGTERM (tracer/programs/signals.py): one line and 130/143; SIGTERM used to kill
  `diff` and `import-trace` silently with 143.
- The output cannot be written (`> /dev/full`, a full disk, an I/O error): stdout is
  wrapped so only a failed write *to the output* becomes "cannot write the output: ...",
  exit 1 -- an OSError of the DB or of a read is not misnamed -- where a traceback was.
- The reader went away (`| head -1`): a quiet exit 0, as `cat` does. In both cases fd 1 is
  pointed at /dev/null so the interpreter's final flush of what is still buffered does
  not print "Exception ignored ..." after the message.
- Memory runs out (a low `ulimit -v`, a full cgroup): a MemoryError, a library that
  cannot map its code (numpy's and pyarrow's ImportError "failed to map segment"), or
  under an address-space limit CPython's "error return without exception set" (an
  allocation that lost its MemoryError), is one line naming the limit, exit 1, where
  `runs` printed a traceback. The recorder's imports
  are made inside `main` for that reason.
- Values no command can use are refused for every command at once (`_POSITIVE`: a
  sampling interval of -3 ms or 0 ranks was accepted silently), exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import pkgutil
import resource  # here, not when memory has run out: importing it maps a shared object
import sys
from typing import Any

from magneton.model import MagnetonError

# Display order in --help; commands not listed here follow alphabetically.
_ORDER = [
    "record",
    "runs",
    "query",
    "report",
    "diff",
    "advise",
    "export_patch",
    "export_trace",
    "import_trace",
    "import_trace",
    "eval",
    "merge",
    "rm",
    "demo",
]


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The command line's parser. With `command` (the subcommand the arguments name),
    only that command's module is imported and registered: importing and registering
    all of them took 35-40 ms of every command's start, as much as opening the DB. With
    None, or a name that is no command, all are registered, so `--help` lists them and a
    misspelt command is refused with the list of choices."""
    import magneton.commands as commands

    parser = argparse.ArgumentParser(
        prog="magneton",
        description=(
            "Differential energy debugging for PyTorch: record two programs that do the same "
            "job, match their operator graphs by value, and explain where one wastes energy."
        ),
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and exit")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    names = [m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_")]
    names.sort(key=lambda n: (_ORDER.index(n) if n in _ORDER else len(_ORDER), n))
    module = (command or "").replace("-", "_")  # `export-patch` lives in export_patch.py
    if module in names:
        names = [module]
    for name in names:
        importlib.import_module(f"magneton.commands.{name}").register(sub)
    return parser


class _Version(argparse.Action):
    """`--version`, whose package metadata is read only when it is asked for: reading it
    imports importlib.metadata and scans the installed distributions, 20-25 ms of every
    command's start (argparse's own "version" action formats it up front)."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(_version())  # stdout, as argparse's own action prints it
        parser.exit()


def _version() -> str:
    try:
        from importlib.metadata import version

        return f"magneton {version('magneton')}"
    except Exception:
        return "magneton (not installed)"


class OutputFailed(OSError):
    """A write to the command's output (stdout) failed with `error`. An OSError still, so
    a recorded script that catches OSError around its print() behaves as it would alone."""

    def __init__(self, error: OSError):
        super().__init__(error.errno, error.strerror or str(error))
        self.error = error


class _GuardedOutput:
    """sys.stdout during a command: a failed write or flush raises `OutputFailed`, so the
    CLI can tell the output's failure from any other OSError (a broken pipe stays a
    BrokenPipeError: the reader left, nothing failed). Everything else is the stream's
    (rich asks for isatty, fileno, encoding)."""

    def __init__(self, stream: Any):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except BrokenPipeError:
            raise
        except OSError as e:
            raise OutputFailed(e) from None

    def flush(self) -> None:
        try:
            self._stream.flush()
        except BrokenPipeError:
            raise
        except OSError as e:
            raise OutputFailed(e) from None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def _drop_output() -> None:
    """Point fd 1 at /dev/null: what is still buffered goes nowhere at exit instead of
    failing again in the interpreter's final flush."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ else 1)
        os.close(devnull)


# options that must be positive wherever a command has them (dest → flag)
_POSITIVE = {"interval_ms": "--interval-ms", "nproc": "--nproc"}


def _check_positive(args: argparse.Namespace) -> None:
    for dest, flag in _POSITIVE.items():
        v = getattr(args, dest, None)
        if v is not None and not v > 0:
            raise MagnetonError(f"{flag} must be a positive number, got {v:g}")


def _out_of_memory(e: BaseException) -> bool:
    if isinstance(e, MemoryError):
        return True
    if isinstance(e, SystemError):
        # CPython code whose allocation fails can return without setting its MemoryError
        # (seen once in CI: importing a dataclass under `ulimit -v` 250 MB); under an
        # address-space limit that is the limit, anywhere else a bug to show in full
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        limited = soft not in (resource.RLIM_INFINITY, -1)
        return limited and "without exception set" in str(e)
    text = str(e).lower()
    return getattr(e, "errno", None) == 12 or "failed to map segment" in text


def _memory_line(e: BaseException) -> str:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    limit = "" if soft in (resource.RLIM_INFINITY, -1) else f"; ulimit -v allows {soft >> 20} MB"
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    # numpy wraps the loader's "failed to map segment" in a page of advice
    what = next((ln for ln in lines if "failed to map" in ln), lines[0] if lines else "")
    what = (what or type(e).__name__)[:200]
    return (
        f"magneton: out of memory or address space ({what}{limit}); raise the limit or free memory"
    )


def console() -> int:
    """The `magneton` process's entry (the console script, `python -m magneton`): `main`
    on the command line, then nothing left for the exit's garbage collections.

    An interpreter that imported torch spent 0.4-0.5 s of wall time ending (`python -c
    "import torch"`: 1.53 s against 1.10 s through `os._exit`), most of it CPython's
    collections over every object still alive while it tears the modules down; a
    recording of a small script took 2.29 s, 1.92 s with this. What is garbage when the
    command is done is collected here, finalizers and all, as the exit would; what is
    still alive is frozen out of the exit's collections (`gc.freeze`), and Python does
    not promise to finalize objects alive at exit anyway. Its atexit handlers still run
    and its streams are still flushed. Not in `main`, which tests call in one process:
    a frozen object would never be collected there."""
    code = main()
    import gc

    gc.collect()
    gc.freeze()
    return code


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except (MemoryError, ImportError, OSError, SystemError) as e:
        if not _out_of_memory(e):
            raise
        print(_memory_line(e), file=sys.stderr)
        return 1


def _main(argv: list[str] | None) -> int:
    from magneton.tracer.api import interruptible, stop_message

    argv = sys.argv[1:] if argv is None else argv
    # the first word that is not an option names the command: the top-level options
    # (--help, --version) take no value
    parser = build_parser(next((a for a in argv if not a.startswith("-")), None))
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        _check_positive(args)
    except MagnetonError as e:
        print(f"magneton: {e}", file=sys.stderr)
        return e.exit_code
    real_stdout = sys.stdout
    sys.stdout = _GuardedOutput(real_stdout)
    try:
        with interruptible():
            code = int(args.func(args) or 0)
            sys.stdout.flush()  # a full disk shows at the flush, not at print()
        return code
    except MagnetonError as e:
        print(f"magneton: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt as e:
        print(f"magneton: {stop_message(e)[0]}", file=sys.stderr)
        return stop_message(e)[1]
    except OutputFailed as e:
        _drop_output()
        why = e.error.strerror or str(e.error)
        print(f"magneton: cannot write the output: {why}", file=sys.stderr)
        return 1
    except BrokenPipeError:
        _drop_output()
        return 0
    finally:
        sys.stdout = real_stdout


if __name__ == "__main__":
    sys.exit(console())
