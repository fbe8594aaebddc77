"""What to change for a diagnosed finding: a patch when the change is mechanical,
guidance otherwise (step 5 of diagnosis, rootcause.py).

By root-cause kind: a config value, API argument or global flag gets its literal
replaced by the efficient run's (or the keyword the library defaults added where the
script builds the object); an environment variable the efficient run's value; different
code the efficient side's statements ported to the wasteful call site (fix/edits.py says when
that is sound). When the two sides' code is the same call with other arguments — in the
region's statements, or at the two origins of a setting the wasteful side left at its
default — only those arguments are carried over (fix/ports.py): the user's statement keeps
its form, and a default is replaced where it is used instead of undone by one more
statement after it. Nothing is patched when the wasteful script changed since it was
recorded: a patch made against other text would not apply, or worse, apply wrongly.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import libcst as cst

from magneton.graphdb.paths import IGNORED_OPS
from magneton.knowledge.match import RuleMatch
from magneton.model import Finding, Fix, Profile, script_unchanged
from magneton.model.frameworks import framework_name, framework_of

from ..source.dataflow import KeyVariable, Origin
from ..source.index import (
    SourceIndex,
    Span,
    is_user_file,
    real_path,
    source_index,
)
from ..source.text import read_source
from .edits import (
    Block,
    add_keyword,
    extend_to_end,
    make_patch,
    port_statements,
    replace_value,
    statement_block,
    unportable,
)
from .ports import (
    argument_port,
    counterpart_block,
    node_code,
    port_arguments,
)


@dataclass
class RunPair:
    """The two runs' profiles of the finding being diagnosed."""

    a: Profile
    b: Profile


def user_lines(p: Profile, ops: list[int]) -> list[int]:
    """Lines of the user's script that issued the region's (non-bookkeeping) operators."""
    lines = []
    script = real_path(p.run.script)
    for i in ops:
        op = p.ops[i]
        if op.name in IGNORED_OPS:
            continue
        for fi in reversed(op.frames):
            fr = p.frames[fi]
            if real_path(fr.file) == script:
                lines.append(fr.line)
                break
    return sorted(set(lines))


def _literal_code(value: str | None) -> str | None:
    """A snapshot/observed value as Python source: 'True' → True, "'x'" → 'x', '4' → 4."""
    if value is None:
        return None
    try:
        node = cst.parse_expression(value)
    except cst.ParserSyntaxError:
        return repr(value)
    if isinstance(node, (cst.Name, cst.SimpleString, cst.Integer, cst.Float, cst.UnaryOperation)):
        return value
    return repr(value)


def _is_expression(text: str | None) -> bool:
    try:
        cst.parse_expression(text or "")
    except cst.ParserSyntaxError:
        return False
    return True


def _rel(path: str | None, base: str) -> str:
    if not path:
        return ""
    try:
        rel = os.path.relpath(path, base)
    except ValueError:
        return path
    return path if rel.startswith("..") else rel


@dataclass
class _FixInput:
    """What every kind of fix needs: the finding, its sides (w: wasteful, e: efficient)
    and the diagnosis so far."""

    finding: Finding
    kv: KeyVariable | None
    origins: dict[str, Origin | None]
    runs: RunPair
    rule: RuleMatch | None
    kind: str

    @property
    def w(self) -> str:
        return self.finding.wasteful

    @property
    def e(self) -> str:
        return "b" if self.w == "a" else "a"

    @property
    def pw(self) -> Profile:
        return self.runs.a if self.w == "a" else self.runs.b

    @property
    def pe(self) -> Profile:
        return self.runs.b if self.w == "a" else self.runs.a

    def library_site(self) -> str | None:
        """Where the rule's wasteful operators run, when only library code issues them.
        Only for a rule whose advice is an edit of the calling code (no knob): a setting's
        advice (`torch.backends.mkldnn.enabled = True`) holds wherever the op runs."""
        if self.rule is None or self.rule.rule.knob:
            return None
        ev = self.rule.rule.wasteful
        names = set(ev.ops) | set(ev.any_ops)
        ops = self.finding.region_a.ops if self.w == "a" else self.finding.region_b.ops
        return library_site(self.pw, ops, names) if names else None

    @property
    def base(self) -> str:
        return os.path.dirname(self.pw.run.script) if self.pw.run.script else ""

    def rule_text(self) -> str:
        if self.rule is None:
            return ""
        inside = self.library_site()
        if inside is not None:
            # the rule's advice is an edit where the operators are issued; there it would
            # be an edit of the library, so name the pattern and where it happens instead
            return f"({self.rule.rule.title}: done inside {inside}, not in your code.)"
        kv, e = self.kv, self.e
        eff_value = kv.values[e] if kv is not None and kv.values.get(e) else None
        return self.rule.rule.render_fix(
            efficient_value=eff_value if self.rule.rule.efficient_value is None else None,
            knob=kv.knob.key if kv is not None and kv.knob is not None else None,
        )


_TORCH_MODULES = f"{os.sep}torch{os.sep}nn{os.sep}modules{os.sep}"


def _library_frame(p: Profile, op: int) -> tuple[str, int, str] | None:
    """The innermost frame of library code below the user's last frame that the user did
    not call as an API: a model library (transformers, diffusers, ...) or a torch module's
    implementation (nn.TransformerEncoderLayer's forward) between the user's call and the
    operator. torch's functional and tensor API called from the user's line
    (`F.pad(...)`, `x.contiguous()`) is the user's own call, so it does not count."""
    frames = [p.frames[i] for i in p.ops[op].frames if 0 <= i < len(p.frames)]
    user = [k for k, f in enumerate(frames) if is_user_file(f.file, p.run.script)]
    below = frames[user[-1] + 1 :] if user else frames
    lib = [f for f in below if f"{os.sep}torch{os.sep}" not in f.file or _TORCH_MODULES in f.file]
    return (lib[-1].file, lib[-1].line, lib[-1].function) if lib else None


def library_site(p: Profile, ops: list[int], names: set[str]) -> str | None:
    """Where operators named `names` among `ops` are issued, when a library other than
    torch issues every one of them ("transformers/models/gpt2/modeling_gpt2.py:312 in
    forward"); None when the user's code (or torch's API it calls) issues any."""
    sites = []
    for o in ops:
        if p.ops[o].name not in names:
            continue
        site = _library_frame(p, o)
        if site is None:
            return None
        sites.append(site)
    if not sites:
        return None
    file, line, fn = sites[0]
    parts = file.split(os.sep)
    if "site-packages" in parts:
        file = os.sep.join(parts[parts.index("site-packages") + 1 :])
    return f"{file}:{line} in {fn}"


def make_fix(
    finding: Finding,
    kv: KeyVariable | None,
    origins: dict[str, Origin | None],
    runs: RunPair,
    rule: RuleMatch | None,
    kind: str,
) -> Fix:
    x = _FixInput(finding, kv, origins, runs, rule, kind)
    fix = Fix(base_dir=x.base or None)
    rule_text = x.rule_text()
    if not script_unchanged(x.pw):
        fix.summary = (
            f"{os.path.basename(x.pw.run.script or '?')} changed since it was recorded; "
            "re-record it to get a patch. " + rule_text
        ).strip()
        return fix
    if framework(x.pw) != framework(x.pe):
        fix.summary = _across_frameworks(x)
        return fix
    if kind in ("config", "api-argument", "global-flag") and origins.get(x.w) is not None:
        _setting_fix(x, fix, rule_text)
    elif kind in ("env", "command-line"):
        _run_with_fix(x, fix, rule_text)
    elif kind == "config-file" and origins.get(x.w) is not None:
        _config_file_fix(x, fix, rule_text)
    elif kind == "code":
        _code_fix(x, fix)
        if rule_text:
            fix.summary += " " + rule_text
    elif finding.divergence is not None and finding.divergence.same_everything():
        fix.summary = (
            "Nothing to change: the two sides do the same thing here; re-record both runs "
            "with a larger --repeat to see whether the difference persists."
        )
    else:
        fix.summary = rule_text or "No mechanical fix: compare the two sides' code for this region."
    return refuse_noop(fix, x, rule_text)


def framework(p: Profile) -> str:
    """The framework run `p` recorded (tracer/frameworks; a PyTorch run names none)."""
    return framework_of(p.config)


def _across_frameworks(x: _FixInput) -> str:
    """Advice for a region matched across frameworks: each side's statement, and no
    patch. A port of the efficient side's code into the wasteful script (the code fix)
    pasted `tf.math.count_nonzero` and `import tensorflow` into a PyTorch script, whose
    tensors that call cannot take; the equivalent call is named instead."""
    f = x.finding

    def where(p: Profile, ops: list[int]) -> str:
        lines = user_lines(p, ops)
        if not lines:
            return f"inside {framework_name(framework(p))}'s library code"
        index = source_index(p.run.script)
        code = index.line_text(lines[0]).strip() if index is not None else ""
        here = f"{_rel(p.run.script, x.base)}:{lines[0]}"
        return f"at {here} (`{code}`)" if code else f"at {here}"

    ops_w, ops_e = (
        (f.region_a.ops, f.region_b.ops) if x.w == "a" else (f.region_b.ops, f.region_a.ops)
    )
    name_w, name_e = framework_name(framework(x.pw)), framework_name(framework(x.pe))
    return (
        f"The two sides are different frameworks: here {name_w} runs this "
        f"{where(x.pw, ops_w)}; {name_e} does the same job for less "
        f"{where(x.pe, ops_e)}. No patch across frameworks: the efficient side's call is "
        f"the {name_e} equivalent to port, or look for the {name_w} call that does the "
        "same work."
    )


def _normal(text: str) -> str:
    """Text compared for sameness: whitespace-insensitive, `'x'` and `"x"` alike."""
    return " ".join(text.replace('"', "'").split())


def refuse_noop(fix: Fix, x: _FixInput, rule_text: str = "") -> Fix:
    """The one check every fix passes: a fix whose new text equals the old one (a patch
    that changes nothing, "change X from A to A", the same code "ported" over itself) is
    replaced by saying that no mechanical fix exists and where the two sides differ.
    Such a fix arises whenever the walk stops at an expression both sides share (both
    read `args.x`, both call `model(x)`): the difference lies beyond what was followed."""
    if fix.old_text is None or fix.new_text is None:
        return fix
    if _normal(fix.old_text) != _normal(fix.new_text):
        return fix
    same = fix.old_text.strip()
    if "\n" in same or len(same) > 80:
        same = same.splitlines()[0][:80] + " ..."
    fix.patch = None
    fix.file = None
    fix.snippet = None
    fix.summary = (
        f"No mechanical fix: the wasteful side's text ({same}) already reads like the "
        f"efficient side's, so the difference lies beyond it; the two sides differ at "
        f"{divergence_text(x.finding)}. " + rule_text
    ).strip()
    return fix


def divergence_text(f: Finding) -> str:
    """Where the two sides of a finding part, in words (for fixes that cannot patch)."""
    d = f.divergence
    if d is None:
        return "a point Magneton could not locate"

    def label(e) -> str:
        if e.kind == "frame":
            return (
                f"{os.path.basename(e.file or '')}:{e.line} {e.function} ({(e.code or '').strip()})"
            )
        if e.kind == "args":
            diff = ", ".join(f"{k}={v}" for k, v in (e.diff or {}).items())
            return f"{e.op} with {diff or 'the same arguments'}"
        if e.kind == "none":
            return "nothing (extra work on the other side)"
        return e.name or e.kind

    return f"{label(d.a)} (a) vs {label(d.b)} (b)"


def _new_code(x: _FixInput) -> str | None:
    """Source text of the efficient side's value: its origin's literal, else the value
    the re-run or snapshot saw, else the rule's efficient value."""
    oe, kv = x.origins.get(x.e), x.kv
    new_code = None
    if oe is not None and oe.value is not None and oe.span is not None:
        new_code = oe.value
    elif oe is not None and oe.library_default and _is_expression(oe.value):
        new_code = oe.value  # the default the efficient side leaves, written out
    elif kv is not None:
        new_code = _literal_code(kv.values.get(x.e))
    if x.rule is not None and x.rule.rule.efficient_value is not None and new_code is None:
        new_code = _literal_code(x.rule.rule.efficient_value)
    return new_code


def _runs_extra_statement(x: _FixInput) -> bool:
    """The wasteful side runs a setting statement the efficient side lacks (setupflow's
    statement origin: no value span; the efficient side's origin is the default)."""
    ow, oe = x.origins[x.w], x.origins.get(x.e)
    return (
        ow is not None
        and ow.span is None
        and not ow.library_default
        and bool(ow.value and ow.file and ow.line)
        and oe is not None
        and oe.library_default
    )


def _setting_fix(x: _FixInput, fix: Fix, rule_text: str) -> None:
    """A config value, API argument or global flag: patch its literal (or add the
    keyword the library defaults) to the efficient run's value."""
    ow, kv, base, w, e = x.origins[x.w], x.kv, x.base, x.w, x.e
    assert ow is not None
    new_code = _new_code(x)
    patched = None
    user_value = ow.span is not None and ow.file and is_user_file(ow.file, x.pw.run.script)
    if user_value and new_code and _value_port_is_partial(x):
        _code_fix(x, fix, with_origins=True)
        fix.summary = (fix.summary + " " + rule_text).strip()
        return
    if user_value and new_code:
        assert ow.file is not None and ow.span is not None
        patched = replace_value(ow.file, ow.span, new_code)
        fix.old_text, fix.new_text = ow.value, new_code
        fix.sets_variable = True
        fix.file = _rel(ow.file, base)
        where = f"{_rel(ow.file, base)}:{ow.line}"
        name = f"{ow.assigned_to} (which sets {ow.variable})" if ow.assigned_to else ow.variable
        fix.summary = (
            f"In {where} change {name} from {ow.value} to {new_code} "
            f"(the value the efficient run used)."
        )
    elif ow.library_default and _origin_argument_fix(x, fix):
        pass  # the wasteful statement makes the efficient side's call without the keyword
    elif ow.library_default and ow.insert and "statement" in ow.insert:
        # never set on this side: add the efficient side's setting statement
        ins = ow.insert
        patched = insert_statement(ins["file"], ins["end_line"], ins["statement"])
        fix.old_text, fix.new_text = "", ins["statement"]
        fix.file = _rel(ins["file"], base)
        oe = x.origins.get(e)
        there = f" ({os.path.basename(oe.file or '')}:{oe.line})" if oe is not None else ""
        # `end_line` is the last line the statement goes after: one before `line` when it
        # goes before that line's statement (a decorator above its `def`)
        after = ins["end_line"] >= ins["line"]
        where_to = f"{'after' if after else 'before'} line {ins['line']}"
        fix.summary = (
            f"{ow.variable} is never set in {_rel(ins['file'], base)} (the default, "
            f"{ow.value}); add `{ins['statement']}` {where_to}, as the "
            f"efficient side does{there}."
        )
    elif ow.library_default and ow.insert and new_code:
        ins = ow.insert
        patched = add_keyword(ins["file"], Span(*ins["span"]), ins["keyword"], new_code)
        fix.file = _rel(ins["file"], base)
        where = f"{_rel(ins['file'], base)}:{ins['line']}"
        fix.summary = (
            f"{ow.variable} is the library default {ow.value} "
            f"({_rel(ow.file, base)}:{ow.line}); pass {ins['keyword']}={new_code} "
            f"where the script builds it ({where})."
        )
    elif _runs_extra_statement(x):
        oe = x.origins[e]
        assert oe is not None  # _runs_extra_statement checked it
        fix.summary = (
            f"{_rel(ow.file, base)}:{ow.line} runs `{ow.value}`, which sets {ow.variable} "
            f"to {kv.values.get(w) if kv is not None else 'another value'}; the efficient "
            f"side has no such statement ({ow.variable} stays {oe.value if oe.value != '(not run)' else 'the default'}). "
            "Remove it or make it conditional (no patch: deleting a statement can change "
            "what the code after it reads)."
        )
    elif x.kind == "global-flag" and kv is not None and kv.knob is not None:
        fix.summary = (
            f"{kv.knob.key} is {kv.values.get(w)} in the wasteful run and "
            f"{kv.values.get(e)} in the efficient one, but the script does not set it; "
            f"set it explicitly (e.g. {kv.knob.key} = {new_code})."
        )
    if patched is not None:
        p = make_patch(fix_file_abs(fix, base), base, patched)
        fix.patch = p.diff() if p else None
    if rule_text:
        fix.summary = (fix.summary + " " + rule_text).strip()
    if not fix.summary:
        fix.summary = rule_text or _named_setting(x)


def _named_setting(x: _FixInput) -> str:
    """The setting to change, named with both sides' values and places, when no patch
    can be made (a value that is not a literal, a statement that is not the user's)."""
    ow, oe = x.origins[x.w], x.origins.get(x.e)
    assert ow is not None

    def at(o: Origin) -> str:
        return f"{_rel(o.file, x.base)}:{o.line}" if o.file else "(unknown place)"

    there = f"; the efficient run has {oe.value} ({at(oe)})" if oe is not None else ""
    return (
        f"Set {ow.variable} as the efficient run does: it is {ow.value} at {at(ow)}{there}. "
        "No patch: the value there is not a literal Magneton can rewrite."
    )


def _option_command(x: _FixInput, option: str, why: str, eff: str | None) -> tuple[str, str | None]:
    """The fix's words and command line for a command-line option: the wasteful program
    run with the option set as the efficient run set it, a command line its own parser
    accepts (tracer/programs/cmdline.py); without one, what to set, and why no line."""
    from magneton.tracer.programs.cmdline import fixed_arguments
    from magneton.tracer.programs.program import ProgramSpec

    spec = ProgramSpec.from_config(x.pw.config)
    cf, refused = fixed_arguments(x.pw.config, x.pe.config, option)
    if spec is None or cf is None:
        return (
            f"Set {option} as the efficient run did ({eff}; {why}); no command line to "
            f"paste: {refused or 'not a program run'}.",
            None,
        )
    command = spec.python_command(cf.args)
    return f"Run `{command}` as the efficient run did: {cf.change()} ({why}).", command


def _config_file_fix(x: _FixInput, fix: Fix, rule_text: str) -> None:
    """A setting read from a config file the program was given (tracer/programs/
    configfiles.py): patch the key in the wasteful run's file to the efficient run's value;
    or run with the efficient run's file (a command line its parser accepts)."""
    from magneton.tracer.programs.configfiles import config_files, set_key

    ow, oe = x.origins[x.w], x.origins.get(x.e)
    assert ow is not None and ow.file
    keys = tuple(ow.variable.split("."))
    eff_doc = next((f.doc for f in config_files(x.pe.config) if oe and f.path == oe.file), None)
    eff = _dig(eff_doc, keys)
    fmt = next((f.format for f in config_files(x.pw.config) if f.path == ow.file), "yaml")
    fix.old_text, fix.new_text = ow.value, None if eff is None else str(eff)
    fix.sets_variable = True
    name = os.path.basename(ow.file)
    if ow.option:
        line, fix.command = _option_command(x, ow.option, ow.note, oe.value if oe else None)
    else:
        line = ""
    patched = set_key(ow.file, keys, eff, fmt) if eff is not None else None
    p = make_patch(ow.file, x.base, patched) if patched is not None else None
    if p is not None:
        fix.file = _rel(ow.file, x.base)
        fix.patch = p.diff()
        fix.summary = (
            f"Set {ow.variable} to {eff} in {name} as the efficient run's file does (the patch)."
        )
        if fix.command:
            fix.summary += f" Or: {line}"
    else:
        fix.summary = line or f"Set {ow.variable} in {name} as the efficient run's file does."
    if rule_text:
        fix.summary += " " + rule_text


def _dig(doc: Any, keys: tuple) -> Any:
    for k in keys:
        if not isinstance(doc, dict) or k not in doc:
            return None
        doc = doc[k]
    return doc


def _run_with_fix(x: _FixInput, fix: Fix, rule_text: str) -> None:
    """A value the program gets from how it is run — an environment variable or a
    command-line option: run with the efficient value; patch where the script sets it
    (the env assignment, or the option's `default=` literal)."""
    ow, oe, kv = x.origins.get(x.w), x.origins.get(x.e), x.kv
    eff = (oe.value if oe else None) or (kv.values.get(x.e) if kv else None)
    was = (ow.value if ow else None) or "(unset)"
    fix.sets_variable = True
    if ow is not None and ow.option:
        fix.old_text, fix.new_text = was, eff
        fix.summary, fix.command = _option_command(x, ow.option, ow.note or ow.variable, eff)
    else:
        var = (ow.env_var if ow else None) or (ow.variable if ow else "")
        eff, was = _env_values(x, var, eff, was)
        fix.old_text, fix.new_text = was, eff
        fix.summary, fix.command = _env_command(x, var, eff, was)
    if rule_text:
        fix.summary += " " + rule_text
    target = None
    if ow is not None and ow.span is not None and ow.file:
        target = (ow.file, ow.span, ow.value or "")
    elif ow is not None and ow.option_default is not None:
        d = ow.option_default
        target = (d["file"], d["span"], d["value"])
    if target is None or eff is None:
        return
    file, span, old = target
    new = repr(eff) if old[:1] in "'\"" else (_literal_code(eff) or repr(eff))
    if _normal(new) == _normal(old):
        return  # the script already defaults to it: only the command line differs
    patched = replace_value(file, span, new)
    p = make_patch(file, x.base, patched) if patched is not None else None
    if p is not None:
        fix.file = _rel(file, x.base)
        fix.patch = p.diff()
        if ow is not None and ow.option:  # (a target comes from ow: it is not None)
            fix.summary += f" The patch makes {new} the default of {ow.option}."


def _env_values(x: _FixInput, var: str, eff: str | None, was: str) -> tuple[str | None, str]:
    """(efficient, wasteful) values of environment variable `var` as the two runs read
    it (tracer/programs/envreads.py), where recorded: the origin's value is what the
    program made of it (`DETECT_ANOMALY = ... == "1"` holds True, the run had "1")."""
    from magneton.tracer.programs.envreads import UNRECORDED, recorded_value

    read_e, read_w = recorded_value(x.pe.config, var), recorded_value(x.pw.config, var)
    if read_e is not UNRECORDED:
        eff = None if read_e is None else str(read_e)
    if read_w is not UNRECORDED:
        was = "(unset)" if read_w is None else str(read_w)
    return eff, was


def _env_command(x: _FixInput, var: str, eff: str | None, was: str) -> tuple[str, str | None]:
    """The fix's words, and for a program run the command line with the variable as the
    efficient run had it."""
    import shlex

    from magneton.tracer.programs.program import ProgramSpec

    spec = ProgramSpec.from_config(x.pw.config)
    if eff is None:
        return f"Run with {var} unset as the efficient run did (it was {was}).", None
    if spec is None:
        return f"Run with {var}={eff} as the efficient run did (it was {was}).", None
    command = f"{var}={shlex.quote(eff)} {spec.python_command()}"
    return f"Run `{command}` as the efficient run did ({var} was {was}).", command


def _region_lines(x: _FixInput) -> tuple[list[int], list[int]]:
    """The user lines that issued the region's operators: (wasteful side, efficient side)."""
    f = x.finding
    lines_w = user_lines(x.pw, f.region_a.ops if x.w == "a" else f.region_b.ops)
    lines_e = user_lines(x.pe, f.region_b.ops if x.w == "a" else f.region_a.ops)
    return lines_w, lines_e


def _own_origin_line(x: _FixInput, side: str) -> int:
    """The line of `side`'s origin when it is in that side's own script, else 0: a value
    set in another module is not part of the statements to compare or port (and line 0
    is in no statement)."""
    o = x.origins.get(side)
    script = (x.pw if side == x.w else x.pe).run.script or ""
    return o.line if o is not None and o.line and _same_file(o.file or "", script) else 0


def _lines_with_origins(
    x: _FixInput, lines_w: list[int], lines_e: list[int]
) -> tuple[list[int], list[int]]:
    """The region's user lines on each side plus that side's own origin line."""
    ow, oe = _own_origin_line(x, x.w), _own_origin_line(x, x.e)
    return ([*lines_w, ow] if ow else lines_w), ([*lines_e, oe] if oe else lines_e)


def _value_port_is_partial(x: _FixInput) -> bool:
    """Porting the one differing value would leave the region's statements differing
    elsewhere: `scores = logits.permute(0, 2, 1)` -> `logits.reshape(-1, VOCAB)` alone
    feeds (batch*seq, vocab) scores to a loss still given (batch, seq) labels, since the
    efficient side also flattens the labels. Compared are the statements that issued the
    region's operators, together with the value's own statement, on both sides, each
    without the statement that holds the value."""
    ow, oe = x.origins.get(x.w), x.origins.get(x.e)
    if ow is None or oe is None or not (ow.line and oe.line):
        return False
    lines_w, lines_e = _region_lines(x)
    if not lines_w or not lines_e:
        return False
    lines_w, lines_e = _lines_with_origins(x, lines_w, lines_e)
    bw = statement_block(x.pw.run.script or "", lines_w)
    be = statement_block(x.pe.run.script or "", lines_e)
    if bw is None or be is None:
        return False

    def rest(b: Block, line: int) -> list[str]:
        return [
            _normal(b.idx.code(st)) for st in b.statements if not b.idx.span(st).contains_line(line)
        ]

    rw, re_ = rest(bw, _own_origin_line(x, x.w)), rest(be, _own_origin_line(x, x.e))
    # a statement the other file also holds word for word is not a difference in code: the
    # value chose which of the two branches ran (`if per_row:` ... `else:` in both files,
    # `PER_ROW = True` vs `False`), and porting the value alone makes the other one run
    in_e, in_w = _all_statements(be.idx), _all_statements(bw.idx)
    return [s for s in rw if s not in in_e] != [s for s in re_ if s not in in_w]


def _all_statements(idx: SourceIndex) -> set[str]:
    """The normalised text of every simple statement of a file, at any depth."""
    return {_normal(idx.code(st)) for st in idx.nodes_of(cst.SimpleStatementLine)}


def _same_file(a: str, b: str) -> bool:
    return bool(a and b) and os.path.realpath(a) == os.path.realpath(b)


def _code_fix(x: _FixInput, fix: Fix, with_origins: bool = False) -> None:
    """Different code on the two sides: port the efficient side's statements (with
    `with_origins`, the statements of the origins' values too)."""
    pw, pe, base = x.pw, x.pe, x.base
    lines_w, lines_e = _region_lines(x)
    if with_origins:
        lines_w, lines_e = _lines_with_origins(x, lines_w, lines_e)
    bw = statement_block(pw.run.script, lines_w) if lines_w else None
    be = statement_block(pe.run.script, lines_e) if lines_e else None
    if bw is not None and be is None:
        # the efficient side recorded nothing here (the wasteful side's extra work has
        # no counterpart): its statements are the ones standing in the same place
        be = counterpart_block(bw, pe.run.script)
    if (bw is None or be is None) and _origin_value_fix(x, fix):
        return
    if bw is None or be is None:
        missing = os.path.basename((pw if bw is None else pe).run.script or "?")
        fix.summary = (
            f"No patch: no statement of {missing} issues this region's operators (they "
            "run inside library code only); compare the two sides' calls into it."
        )
        return
    if _argument_fix(x, fix, bw, be):
        return
    port = port_statements(bw, be)
    if port.text is None:
        # the matcher may cut one computation into several findings, so the region's
        # statements alone can miss the code that produces the returned value; retry
        # with both blocks extended to the end of their block (the rest of the
        # computation, up to its return)
        for xw, xe in (
            (extend_to_end(bw), extend_to_end(be)),
            (extend_to_end(bw, whole=True), extend_to_end(be, whole=True)),
        ):
            retry = port_statements(xw, xe)
            if retry.text is not None:
                port, bw, be = retry, xw, xe
                break
    fix.snippet = port.snippet.strip()
    # the same statements on both sides: porting them changes nothing
    fix.old_text, fix.new_text = bw.code(), be.code()
    fw, lw = bw.lines()
    where = f"{_rel(pw.run.script, base)}:{fw}" + (f"-{lw}" if lw != fw else "")
    if port.text is None and _origin_value_fix(x, fix):
        return
    if port.text is None:
        fix.summary = (
            f"Rewrite {where} like the efficient side "
            f"({os.path.basename(pe.run.script)}:{be.lines()[0]}); not ported "
            f"automatically: {port.reason}."
        )
        return
    p = make_patch(pw.run.script, base, port.text)
    fix.patch = p.diff() if p else None
    fix.file = _rel(pw.run.script, base)
    fe_, le_ = be.lines()
    fix.summary = (
        f"Replace {where} with the efficient side's code "
        f"({os.path.basename(pe.run.script)}:{fe_}"
        + (f"-{le_}" if le_ != fe_ else "")
        + ")"
        + (f"; {port.reason}" if port.reason else "")
        + "."
    )


def _origin_value_fix(x: _FixInput, fix: Fix) -> bool:
    """The differential slice's smallest differing expression (diffslice.py): replace the
    wasteful side's with the efficient side's, when the statements around it could not
    be ported whole (`x.clone().detach()` -> `x.detach()` inside a loop)."""
    ow, oe = x.origins.get(x.w), x.origins.get(x.e)
    if ow is None or oe is None or ow.span is None or oe.span is None or not oe.value:
        return False
    if not (ow.file and is_user_file(ow.file, x.pw.run.script)):
        return False
    patched = replace_value(ow.file, ow.span, oe.value)
    p = make_patch(ow.file, x.base, patched) if patched is not None else None
    if p is None:
        return False
    fix.patch = p.diff()
    fix.file = _rel(ow.file, x.base)
    fix.old_text, fix.new_text = ow.value, oe.value
    fix.sets_variable = True
    fix.summary = (
        f"In {_rel(ow.file, x.base)}:{ow.line} replace `{ow.value}` with `{oe.value}`, "
        f"as the efficient side does ({os.path.basename(oe.file or '')}:{oe.line})."
    )
    return True


def _origin_argument_fix(x: _FixInput, fix: Fix) -> bool:
    """A setting the wasteful side leaves at its default, where the two origins'
    statements are the same call but for its arguments (`images.contiguous()` vs
    `images.contiguous(memory_format=torch.channels_last)`): give the wasteful call the
    efficient arguments. Adding the efficient statement after the wasteful one instead
    would keep the default's work and undo it on the next line (a copy to NCHW, then
    one back to channels-last)."""
    ow, oe, script = x.origins.get(x.w), x.origins.get(x.e), x.pw.run.script
    if ow is None or oe is None or not (ow.file and ow.line and oe.file and oe.line):
        return False
    if not script or os.path.realpath(ow.file) != os.path.realpath(script):
        return False  # only the recorded script is known unchanged since recording
    bw = statement_block(ow.file, [ow.line])
    be = statement_block(oe.file, [oe.line])
    return bw is not None and be is not None and _argument_fix(x, fix, bw, be, snippet=False)


def _argument_fix(x: _FixInput, fix: Fix, bw: Block, be: Block, snippet: bool = True) -> bool:
    """The two sides make the same call and differ only in its arguments: patch the
    wasteful call with the efficient side's arguments (fix/ports.py), keeping the rest of
    the wasteful statement as written. Tried on the region's statements, the efficient
    statements standing in the wasteful ones' place, then the region's statements
    extended to the end of their block (as the statement port is); False when no single
    call's arguments are the whole difference, or the efficient arguments read a name
    the wasteful side lacks or defines differently."""
    pw, pe, base = x.pw, x.pe, x.base
    pairs = [
        (bw, be),
        (extend_to_end(bw), extend_to_end(be)),
        (extend_to_end(bw, whole=True), extend_to_end(be, whole=True)),
    ]
    # the region's statements on the efficient side can be other ones than the wasteful
    # side's (its twin operator sits on a later line when the call there did no work):
    # also try the statements standing in the wasteful block's place
    there = counterpart_block(bw, pe.run.script)
    if there is not None:
        pairs.insert(1, (bw, there))
    for w, e in pairs:
        diff = argument_port(w.statements, e.statements)
        if diff is None or unportable(w, e):
            continue
        span = w.idx.span(diff.wasteful)
        patched = port_arguments(w.idx.text, span, diff.efficient)
        p = make_patch(pw.run.script, base, patched)
        if p is None:
            continue
        fix.patch = p.diff()
        fix.file = _rel(pw.run.script, base)
        fix.old_text = node_code(diff.wasteful)
        fix.new_text = node_code(diff.efficient)
        if snippet:
            fix.snippet = node_code(diff.efficient).strip()
        eline = e.idx.span(diff.efficient).line
        fix.summary = (
            f"In {_rel(pw.run.script, base)}:{span.line} call {diff.callee} with the "
            f"efficient side's arguments ({os.path.basename(pe.run.script)}:{eline}): "
            f"{diff.summary()}."
        )
        return True
    return False


def insert_statement(file: str, after_line: int, statement: str) -> str:
    """The file's text with `statement` added after line `after_line`, indented like
    that line (the statement it follows)."""
    lines = read_source(file).splitlines(keepends=True)
    ref = lines[after_line - 1].rstrip("\r\n") if after_line >= 1 else ""
    if not ref.strip() and after_line < len(lines):
        # a blank line (or the top of the file) says nothing about the indentation: take
        # the statement the new one comes before (a decorator goes before its `def`)
        ref = lines[after_line].rstrip("\r\n")
    indent = ref[: len(ref) - len(ref.lstrip())]
    lines.insert(after_line, f"{indent}{statement}\n")
    return "".join(lines)


def fix_file_abs(fix: Fix, base: str) -> str:
    f = fix.file or ""
    return f if os.path.isabs(f) else os.path.join(base, f)
