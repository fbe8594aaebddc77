"""A program's command-line parser, recorded so that a suggested command line can be
checked against it: `--grad-checkpointing False` must never be printed for a
`store_true` flag (the program answers `unrecognized arguments: False`).

While a program is recorded, every `argparse.ArgumentParser.parse_known_args` call that
parses the program's own arguments (`sys.argv[1:]`, what `parse_args()` and
`HfArgumentParser.parse_args_into_dataclasses()` both end in) is observed: its actions
(option strings, dest, kind, nargs, choices, type), whether it tolerated unknown
arguments, and the values it produced are stored in the run's config
(`program.parsers`, JSON). A click command's (and so a typer app's) parse of the
program's arguments is recorded in the same terms (`_click_spec`: a `--x/--no-x` flag is
a `BooleanOptionalAction`, another flag pair a `store_true` and a `store_false` of one
dest, a `Choice` its choices); its dests are the command function's parameters, which the
program reads by name rather than as `args.NAME` (`ParserSpec.library`). A subcommand
of a click group parses what the group left, not the program's arguments, and is not
recorded. Nothing of the parser runs later: diagnosis runs on a saved DB,
maybe on another machine.

From that record:

* `dest_value` is what the program's parser gave a dest (`grad_checkpointing`: `True`),
  and `occurrences` the argument words that set it, found as argparse finds them
  (`--x v`, `--x=v`, `-xv`, abbreviations, `nargs`, switches that take no value);
* `rewrite` makes the wasteful run's command line set a dest the way the efficient run's
  did: the efficient run's words for it replace the wasteful run's (a `store_true` flag
  is dropped or added, a `--no-x` of `BooleanOptionalAction` swapped, a `choices` value
  or `nargs` list replaced, `append` occurrences replaced as a whole);
* `check` parses the result with a parser rebuilt from the record (the same actions,
  values kept as the words typed, choices as words) and accepts it only if it parses,
  leaves no new unknown argument, gives the dest the efficient run's value and every
  other dest the wasteful run's. A command line that fails the check is never shown.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, NoReturn

CONFIG_KEY = "program.parsers"

# argparse's action classes by the `action=` name that builds them
_KINDS = {
    "_StoreAction": "store",
    "_StoreConstAction": "store_const",
    "_StoreTrueAction": "store_true",
    "_StoreFalseAction": "store_false",
    "_AppendAction": "append",
    "_AppendConstAction": "append_const",
    "_ExtendAction": "extend",
    "_CountAction": "count",
    "BooleanOptionalAction": "boolean_optional",
    "_HelpAction": "help",
    "_VersionAction": "version",
    "_SubParsersAction": "parsers",
}
_NO_VALUE = {"store_const", "store_true", "store_false", "append_const", "count", "help"}


@dataclass
class ActionSpec:
    option_strings: list[str]
    dest: str
    kind: str  # a key of _KINDS' values, or "store" for a custom action taking values
    nargs: Any = None  # None, int, "?", "*", "+", "A..." (REMAINDER)
    choices: list[str] | None = None
    const: str | None = None  # repr, for store_const / append_const / nargs="?"
    default: str | None = None  # repr
    bool_type: bool = False  # `type=` converts words to booleans (HfArgumentParser)

    def takes(self) -> Any:
        """How many words after the option it consumes: an int, "?", "*" or "+"."""
        if self.kind in _NO_VALUE or self.kind == "boolean_optional":
            return 0
        if self.nargs is None:
            return 1
        if self.nargs == argparse.REMAINDER:
            return "*"
        return self.nargs


@dataclass
class ParserSpec:
    actions: list[ActionSpec] = field(default_factory=list)
    prefix_chars: str = "-"
    allow_abbrev: bool = True
    known: bool = False  # the program tolerated unknown arguments (parse_known_args)
    values: dict[str, str] = field(default_factory=dict)  # dest -> repr of what it parsed
    argv: list[str] = field(default_factory=list)  # the words it parsed
    # "argparse": dests are read as `args.DEST`; "click": as the command's parameters
    library: str = "argparse"

    def to_json(self) -> dict:
        return {
            "actions": [a.__dict__ for a in self.actions],
            "prefix_chars": self.prefix_chars,
            "allow_abbrev": self.allow_abbrev,
            "known": self.known,
            "values": self.values,
            "argv": self.argv,
            "library": self.library,
        }

    @classmethod
    def from_json(cls, d: dict) -> ParserSpec:
        return cls(
            actions=[ActionSpec(**a) for a in d.get("actions", [])],
            prefix_chars=d.get("prefix_chars", "-"),
            allow_abbrev=bool(d.get("allow_abbrev", True)),
            known=bool(d.get("known")),
            values=dict(d.get("values", {})),
            argv=list(d.get("argv", [])),
            library=str(d.get("library", "argparse")),
        )

    def actions_of(self, dest: str) -> list[ActionSpec]:
        return [a for a in self.actions if a.dest == dest and a.kind not in ("help", "version")]


# --------------------------------------------------------------------------------------
# Recording
# --------------------------------------------------------------------------------------


def _spec_of(parser: argparse.ArgumentParser, args: list[str], ns: Any, extras: list) -> ParserSpec:
    actions = []
    for a in parser._actions:
        kind = _KINDS.get(type(a).__name__, "store" if a.nargs != 0 else "store_const")
        conv = getattr(a, "type", None)
        actions.append(
            ActionSpec(
                option_strings=list(a.option_strings),
                dest=a.dest,
                kind=kind,
                nargs=a.nargs if isinstance(a.nargs, int | str) else None,
                choices=[str(c) for c in a.choices]
                if a.choices is not None and kind != "parsers"
                else None,
                const=None if a.const is None else repr(a.const),
                default=None if a.default is None else repr(a.default),
                bool_type=bool(conv) and "bool" in getattr(conv, "__name__", ""),
            )
        )
    values = {k: repr(v) for k, v in vars(ns).items()} if ns is not None else {}
    return ParserSpec(
        actions=actions,
        prefix_chars=parser.prefix_chars,
        allow_abbrev=parser.allow_abbrev,
        known=bool(extras),
        values=values,
        argv=list(args),
    )


def _click_spec(command: Any, ctx: Any, args: list[str]) -> ParserSpec:
    """A click command's parameters as argparse actions, and the values it parsed. Read
    by duck typing: typer carries its own copy of click, whose parameters describe
    their type by annotation (`type_descriptor`) rather than by a click `ParamType`."""
    actions: list[ActionSpec] = []
    for p in command.get_params(ctx):
        kind = getattr(p, "param_type_name", "")
        if kind == "argument" and p.name:
            nargs = "*" if p.nargs == -1 else (None if p.nargs == 1 else p.nargs)
            actions.append(ActionSpec([], p.name, "store", nargs=nargs))
        elif kind == "option" and p.name and not getattr(p, "expose_value", True):
            actions.append(ActionSpec(list(p.opts), p.name, "help"))  # --help, --version
        elif kind == "option" and p.name:
            actions += _click_option(p)
    values = {k: repr(_plain(v)) for k, v in ctx.params.items()}
    return ParserSpec(
        actions=actions,
        allow_abbrev=False,  # click matches option names whole
        known=bool(ctx.allow_extra_args or ctx.ignore_unknown_options),
        values=values,
        argv=list(args),
        library="click",
    )


def _plain(value: Any) -> Any:
    """An enum choice as the word that selects it (typer's `Attn.sdpa` is `"sdpa"`)."""
    import enum

    return value.value if isinstance(value, enum.Enum) else value


def _click_choices(p: Any) -> list[str] | None:
    import enum

    choices = getattr(getattr(p, "type", None), "choices", None)
    if choices is None:
        hint = getattr(getattr(p, "type_descriptor", None), "annotation", None)
        if isinstance(hint, type) and issubclass(hint, enum.Enum):
            choices = [m.value for m in hint]
    return None if choices is None else [str(_plain(c)) for c in choices]


def _click_bool(p: Any) -> bool:
    click_type = getattr(p, "type", None)
    if click_type is not None:
        return getattr(click_type, "name", "") == "boolean"
    return getattr(getattr(p, "type_descriptor", None), "annotation", None) is bool


def _click_option(p: Any) -> list[ActionSpec]:
    opts, neg = list(p.opts), list(getattr(p, "secondary_opts", []))
    default = getattr(p, "default", None)
    shown = None if default is None or callable(default) else repr(_plain(default))
    if type(default).__name__ == "Sentinel":
        shown = None
    if getattr(p, "count", False):
        return [ActionSpec(opts, p.name, "count", default=shown)]
    if p.is_flag and neg:
        if all(n.startswith("--no-") and "--" + n[5:] in opts for n in neg):
            return [ActionSpec([*opts, *neg], p.name, "boolean_optional", default=shown)]
        return [
            ActionSpec(opts, p.name, "store_true", default=shown),
            ActionSpec(neg, p.name, "store_false", default=shown),
        ]
    if p.is_flag:
        value = getattr(p, "flag_value", True)
        if not isinstance(value, bool) and type(value).__name__ == "Sentinel":
            value = True
        if isinstance(value, bool):
            return [ActionSpec(opts, p.name, f"store_{str(value).lower()}", default=shown)]
        return [ActionSpec(opts, p.name, "store_const", const=repr(value), default=shown)]
    return [
        ActionSpec(
            opts,
            p.name,
            "append" if getattr(p, "multiple", False) else "store",
            nargs=None if p.nargs == 1 else p.nargs,
            choices=_click_choices(p),
            default=shown,
            bool_type=_click_bool(p),
        )
    ]


# the modules holding click's `Command` class: click's own, and typer's copy of it
_CLICK_CORES = ("click.core", "typer._click.core")


@contextlib.contextmanager
def _click_parse_wrapped(wrap: Callable[[Callable], Callable]) -> Iterator[None]:
    """`Command.parse_args` of each click copy replaced by `wrap(original)` while the
    block runs: patched when the program imports the copy (never imported here: that
    would cost every program the import), restored after."""
    from magneton.tracer.programs.onimport import when_imported

    patched: list[tuple[Any, Callable]] = []

    def patch(module: Any) -> None:
        command = getattr(module, "Command", None)
        if command is not None:
            patched.append((command, command.parse_args))
            command.parse_args = wrap(command.parse_args)

    unhooks = [when_imported(name, patch) for name in _CLICK_CORES]
    try:
        yield
    finally:
        for unhook in unhooks:
            unhook()
        for command, original in reversed(patched):
            command.parse_args = original


@contextlib.contextmanager
def observed_parsers() -> Iterator[list[ParserSpec]]:
    """Record the parsers that parse the program's own arguments while the block runs."""
    seen: list[ParserSpec] = []
    with _observed_click(seen):
        with _observed_argparse(seen):
            yield seen


def _observed_click(seen: list[ParserSpec]):
    def wrap(original: Callable) -> Callable:
        def parse_args(self, ctx, args):
            words = list(args)  # before parsing: click's parser consumes the list
            rest = original(self, ctx, args)
            if words == sys.argv[1:]:
                with contextlib.suppress(Exception):  # recording must never break the program
                    seen.append(_click_spec(self, ctx, words))
            return rest

        return parse_args

    return _click_parse_wrapped(wrap)


@contextlib.contextmanager
def _observed_argparse(seen: list[ParserSpec]) -> Iterator[None]:
    original = argparse.ArgumentParser.parse_known_args

    def parse_known_args(self, args=None, namespace=None):
        own = args is None or list(args) == sys.argv[1:]
        ns, extras = original(self, args, namespace)
        if own:
            with contextlib.suppress(Exception):  # recording must never break the program
                seen.append(
                    _spec_of(self, sys.argv[1:] if args is None else list(args), ns, extras)
                )
        return ns, extras

    argparse.ArgumentParser.parse_known_args = parse_known_args  # type: ignore[method-assign]
    try:
        yield
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]


def to_config(parsers: list[ParserSpec]) -> dict[str, str]:
    return {CONFIG_KEY: json.dumps([p.to_json() for p in parsers])} if parsers else {}


def parsers_of(config: dict[str, str]) -> list[ParserSpec]:
    raw = config.get(CONFIG_KEY, "")
    try:
        return [ParserSpec.from_json(d) for d in json.loads(raw)] if raw else []
    except (ValueError, TypeError, KeyError):
        return []


def parser_for(config: dict[str, str], dest: str) -> ParserSpec | None:
    """The recorded parser that defines `dest` (the last one that does)."""
    found = [p for p in parsers_of(config) if p.actions_of(dest)]
    return found[-1] if found else None


# --------------------------------------------------------------------------------------
# Reading a command line as argparse does
# --------------------------------------------------------------------------------------


def _match(spec: ParserSpec, word: str) -> tuple[ActionSpec, str | None] | None:
    """The action an option word names, and a value attached to it (`--x=v`, `-xv`)."""
    if not word or word[0] not in spec.prefix_chars or word in ("-", "--"):
        return None
    optionals = [a for a in spec.actions if a.option_strings]
    for a in optionals:
        if word in a.option_strings:
            return a, None
    if "=" in word:
        head, value = word.split("=", 1)
        for a in optionals:
            if head in a.option_strings:
                return a, value
    if len(word) > 2 and word[1] not in spec.prefix_chars:  # -xVALUE
        for a in optionals:
            if word[:2] in a.option_strings:
                return a, word[2:]
    if spec.allow_abbrev and word.startswith(spec.prefix_chars[0] * 2):
        head, _, value = word.partition("=")
        hits = {
            id(a): a
            for a in optionals
            for o in a.option_strings
            if o.startswith(head) and o.startswith(spec.prefix_chars[0] * 2)
        }
        if len(hits) == 1:
            return next(iter(hits.values())), (value if "=" in word else None)
    return None


def _is_option(spec: ParserSpec, word: str) -> bool:
    if not word or word[0] not in spec.prefix_chars or word == spec.prefix_chars[0]:
        return False
    try:  # a negative number is a value, as argparse reads it when no option looks like one
        float(word)
        return False
    except ValueError:
        return True


def occurrences(spec: ParserSpec, argv: list[str], dest: str) -> list[tuple[int, int]]:
    """The [start, end) word spans of `argv` that set `dest` (an option and its values)."""
    out = []
    i = 0
    while i < len(argv):
        word = argv[i]
        if word == "--":
            break
        hit = _match(spec, word)
        if hit is None:
            i += 1
            continue
        action, attached = hit
        j = i + 1
        if attached is None:
            n = action.takes()
            if isinstance(n, int):
                j = min(len(argv), i + 1 + n)
            else:
                while j < len(argv) and not _is_option(spec, argv[j]) and argv[j] != "--":
                    j += 1
                    if n == "?":
                        break
        if action.dest == dest:
            out.append((i, j))
        i = j
    return out


def rewrite(spec: ParserSpec, wasteful: list[str], efficient: list[str], dest: str) -> list[str]:
    """`wasteful` with its words for `dest` replaced by `efficient`'s (dropped when the
    efficient run left it at its default)."""
    mine = occurrences(spec, wasteful, dest)
    theirs = [w for s, e in occurrences(spec, efficient, dest) for w in efficient[s:e]]
    out: list[str] = []
    at = None
    k = 0
    for s, e in mine:
        out += wasteful[k:s]
        if at is None:
            at = len(out)
        k = e
    out += wasteful[k:]
    if at is None:  # the wasteful run did not set it: add it before `--`, else at the end
        at = out.index("--") if "--" in out else len(out)
    return out[:at] + theirs + out[at:]


# --------------------------------------------------------------------------------------
# Checking a command line with the recorded parser
# --------------------------------------------------------------------------------------


class _Refused(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise _Refused(message)

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise _Refused(message or f"exit {status}")


def _to_bool(word: Any) -> Any:
    if isinstance(word, bool):
        return word
    low = str(word).lower()
    if low in ("yes", "true", "t", "y", "1"):
        return True
    if low in ("no", "false", "f", "n", "0"):
        return False
    raise argparse.ArgumentTypeError(f"Truthy value expected: got {word}")


def _literal(text: str | None) -> Any:
    """A recorded repr back as its value where it is a literal (`[]`, `0`, `'sdpa'`): an
    `append` or `count` action adds to its default; other values stay their repr, the
    same on both sides of a comparison."""
    if text is None:
        return None
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return text


def rebuild(spec: ParserSpec) -> argparse.ArgumentParser:
    """A parser with the recorded actions; values stay the words typed (a recorded
    `type=` is not available), except booleans, converted as the program's converter."""
    p = _Parser(
        add_help=False,
        prefix_chars=spec.prefix_chars,
        allow_abbrev=spec.allow_abbrev,
        exit_on_error=False,
    )
    for a in spec.actions:
        if a.kind in ("help", "version", "parsers"):
            continue
        kw: dict[str, Any] = {"dest": a.dest} if a.option_strings else {}
        if a.kind == "boolean_optional":
            kw["action"] = argparse.BooleanOptionalAction
        else:
            kw["action"] = a.kind
        if a.kind in ("store", "append", "extend"):
            if a.nargs is not None:
                kw["nargs"] = a.nargs
            if a.choices is not None:
                kw["choices"] = a.choices
            if a.bool_type:
                kw["type"] = _to_bool
            if a.nargs == "?" and a.const is not None:
                kw["const"] = a.const
        if a.kind in ("store_const", "append_const"):
            kw["const"] = _literal(a.const)
        if a.kind not in ("store_true", "store_false", "count") or a.default is not None:
            kw["default"] = _literal(a.default)
        with contextlib.suppress(argparse.ArgumentError, ValueError, TypeError):
            if a.option_strings:
                p.add_argument(*a.option_strings, **kw)
            else:
                kw.pop("dest", None)
                p.add_argument(a.dest, **kw)
    return p


def _parse(spec: ParserSpec, argv: list[str]) -> tuple[dict, list[str]]:
    ns, extras = rebuild(spec).parse_known_args(argv)
    return vars(ns), extras


def check(
    spec: ParserSpec, fixed: list[str], wasteful: list[str], efficient: list[str], dest: str
) -> str:
    """Why `fixed` is not the wasteful command line set like the efficient one for `dest`
    ("" when it is): it must parse, add no unknown argument, give `dest` the efficient
    run's value and every other dest the wasteful run's."""
    try:
        got, extras = _parse(spec, fixed)
        want_w, extras_w = _parse(spec, wasteful)
        want_e, _ = _parse(spec, efficient)
    except (_Refused, argparse.ArgumentError) as e:
        return f"the program's parser refuses it ({e})"
    if extras != extras_w:
        return f"the program's parser does not know {' '.join(extras)}"
    if got.get(dest) != want_e.get(dest):
        return f"it gives {dest} {got.get(dest)!r}, not the efficient run's {want_e.get(dest)!r}"
    changed = [k for k in want_w if k != dest and got.get(k) != want_w.get(k)]
    if changed:
        return f"it also changes {', '.join(changed)}"
    return ""


@dataclass
class CommandFix:
    """The wasteful run's arguments set like the efficient run's for one dest."""

    args: list[str]  # the program's arguments (sys.argv[1:]) to run with
    removed: list[str]  # the words that set the dest in the wasteful run
    added: list[str]  # the efficient run's words for it

    def change(self) -> str:
        """What changes, in words: "drops `--x`", "adds `--x`", "`--x b` for `--x a`"."""
        if self.removed and self.added:
            return f"`{' '.join(self.added)}` in place of `{' '.join(self.removed)}`"
        if self.removed:
            return f"drops `{' '.join(self.removed)}`"
        return f"adds `{' '.join(self.added)}`"


def fixed_arguments(
    config_w: dict[str, str], config_e: dict[str, str], option: str
) -> tuple[CommandFix | None, str]:
    """The wasteful program's arguments with `option`'s setting taken from the efficient
    run, checked with the wasteful program's recorded parser; (None, why) when there is
    no such command line (no recorded parser, or the check fails)."""
    args_w = json.loads(config_w.get("program.args", "[]"))
    args_e = json.loads(config_e.get("program.args", "[]"))
    specs = [p for p in parsers_of(config_w) if any(option in a.option_strings for a in p.actions)]
    if not specs:
        return None, "the program's parser was not recorded with the run"
    spec = specs[-1]
    dest = next(a.dest for a in spec.actions if option in a.option_strings)
    fixed = rewrite(spec, args_w, args_e, dest)
    why = check(spec, fixed, args_w, args_e, dest)
    if why:
        return None, why
    removed = [w for s, e in occurrences(spec, args_w, dest) for w in args_w[s:e]]
    added = [w for s, e in occurrences(spec, args_e, dest) for w in args_e[s:e]]
    return CommandFix(fixed, removed, added), ""


# --------------------------------------------------------------------------------------
# Checking with the program's own parser (`magneton eval`, tests)
# --------------------------------------------------------------------------------------


class _Parsed(BaseException):
    """Stops a program once its parser accepted its arguments."""


def parses(script: str, args: list[str]) -> int:
    """Run `script` as `__main__` with `args` until its parser (argparse's or click's)
    has parsed them: 0 when it accepts them (the program stops there), the parser's own
    exit status and message when it does not, 3 when the program parsed no arguments of its own. Slow (it imports
    what the program imports): for checking a suggested command line, not for
    diagnosis."""
    import runpy

    cls = argparse.ArgumentParser
    known, full = cls.parse_known_args, cls.parse_args
    depth = [0]

    def own(words) -> bool:
        return words is None or list(words) == sys.argv[1:]

    # argparse's own parameter names: HfArgumentParser calls `parse_known_args(args=...)`
    def parse_args(self, args=None, namespace=None):
        depth[0] += 1
        try:
            out = full(self, args, namespace)  # refuses unknown words, as the program does
        finally:
            depth[0] -= 1
        if own(args):
            raise _Parsed
        return out

    def parse_known_args(self, args=None, namespace=None):
        out = known(self, args, namespace)
        if own(args) and not depth[0]:  # called directly (HfArgumentParser)
            raise _Parsed
        return out

    def stopping(original):
        def click_parse_args(self, ctx, words):
            mine = own(words)  # before parsing: click's parser consumes the list it is given
            rest = original(self, ctx, words)
            if mine:
                raise _Parsed
            return rest

        return click_parse_args

    sys.argv = [script, *args]
    cls.parse_args, cls.parse_known_args = parse_args, parse_known_args  # type: ignore[method-assign]
    try:
        with _click_parse_wrapped(stopping):
            runpy.run_path(script, run_name="__main__")
    except _Parsed:
        return 0
    except SystemExit as e:
        return e.code if isinstance(e.code, int) else 2
    finally:
        cls.parse_args, cls.parse_known_args = full, known  # type: ignore[method-assign]
    return 3


if __name__ == "__main__":  # python -m magneton.tracer.programs.cmdline SCRIPT ARGS...
    sys.path.insert(0, __import__("os").path.dirname(__import__("os").path.abspath(sys.argv[1])))
    status = parses(sys.argv[1], sys.argv[2:])
    # only the status counts: skip the exit's collections over what the program imported
    __import__("gc").freeze()
    sys.exit(status)
