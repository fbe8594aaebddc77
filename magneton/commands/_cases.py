"""What the two case suites (`magneton eval` and `eval --advise`) share: reading a
case's expect.toml, recording one side as a user runs `magneton record`, and checking a
printed command line with the program's own parser."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

from magneton.model import MagnetonError

# a patched script gets this long to run setup() and main() once
PATCHED_RUN_TIMEOUT_S = 300


def load_expect(case: Path) -> dict:
    f = case / "expect.toml"
    if not f.is_file():
        return {"finding": True}
    try:
        return tomllib.loads(f.read_text())
    except tomllib.TOMLDecodeError as e:
        raise MagnetonError(f"{f}: invalid TOML: {e}") from None


def record(
    target: list[str],
    db: str,
    run: str,
    args: list[str],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> None:
    """Record one script (`target` its path) or program (`target` empty, the command after
    `--` in `args`) in its own process, as a user runs `magneton record`: global flags
    a script sets must not leak into the next recording. Recordings forked from one warm
    interpreter per case (imports paid once) were tried and measured differently: in six
    alternating evaluations of attn_impl each, on an idle machine, the forked ones
    diagnosed 3 and the fresh ones 5 (the forked ones' run energy gap 2-8% against 4-8%)."""
    cmd = [
        sys.executable,
        "-m",
        "magneton",
        "record",
        *target,
        "--db",
        db,
        "--run",
        run,
        "--replace",
        *args,
    ]
    full = {**os.environ, **(env or {})}
    full.setdefault("KINETO_LOG_LEVEL", "5")
    res = subprocess.run(cmd, capture_output=True, text=True, env=full, cwd=cwd, check=False)
    if res.returncode != 0:
        msg = (res.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise MagnetonError(f"recording {run} failed: {msg}")


def command_refusal(case: Path, command: str) -> str:
    """'' when `command` (`[NAME=value ...] python SCRIPT ARGS`, as a fix or a suggestion
    prints it) parses with the program's own parser, run from `case`; else its error."""
    import shlex

    words = shlex.split(command)
    while words and "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
        words = words[1:]  # `NAME=value python ...`: the environment the shell sets
    if words[:2] == ["python", "-m"] or len(words) < 3:
        # a module's parser is the user's package to import; no arguments: nothing for a
        # parser to refuse (env_config's fix)
        return ""
    # absolute: the parse runs in the case's directory (`cwd=case`), where a path
    # relative to the caller's directory names nothing
    script, args = str(case.resolve() / words[1]), words[2:]
    ran = subprocess.run(
        [sys.executable, "-m", "magneton.tracer.programs.cmdline", script, *args],
        cwd=case,
        capture_output=True,
        text=True,
        timeout=PATCHED_RUN_TIMEOUT_S,
    )
    if ran.returncode != 0:
        return (ran.stderr.strip().splitlines() or [f"status {ran.returncode}"])[-1][:200]
    return ""
