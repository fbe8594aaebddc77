"""The `magneton` command line.

Each subcommand lives in `magneton/commands/<name>.py` and exposes
`register(subparsers) -> None`, which adds its parser and sets `func=<callable(args)->int>`.
Keeping one file per command lets the stages grow their commands without editing a
shared dispatcher. Errors meant for users are `MagnetonError`s: one line, non-zero exit.
"""

from __future__ import annotations

import argparse
import importlib
import pkgutil
import sys

from magneton.graphdb.model import MagnetonError

# Display order in --help; commands not listed here follow alphabetically.
_ORDER = [
    "record",
    "runs",
    "query",
    "report",
    "diff",
    "export_patch",
    "export_trace",
    "import_trace",
    "import_trace",
    "eval",
    "merge",
    "rm",
    "demo",
]


def build_parser() -> argparse.ArgumentParser:
    import magneton.commands as commands

    parser = argparse.ArgumentParser(
        prog="magneton",
        description=(
            "Differential energy debugging for PyTorch: record two programs that do the same "
            "job, match their operator graphs by value, and explain where one wastes energy."
        ),
    )
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    names = [m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_")]
    names.sort(key=lambda n: (_ORDER.index(n) if n in _ORDER else len(_ORDER), n))
    for name in names:
        importlib.import_module(f"magneton.commands.{name}").register(sub)
    return parser


def _version() -> str:
    try:
        from importlib.metadata import version

        return f"magneton {version('magneton')}"
    except Exception:
        return "magneton (not installed)"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    try:
        return int(args.func(args) or 0)
    except MagnetonError as e:
        print(f"magneton: {e}", file=sys.stderr)
        return e.exit_code
    except KeyboardInterrupt:
        print("magneton: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 0


if __name__ == "__main__":
    sys.exit(main())
