"""`magneton advise`'s output: the ranked suggestions (setting, from → to, saving with its
interval, confirmed, same outputs, the fix), then every variant tried that is not a
suggestion with the reason, then what was left untried; the same as JSON
(`{"base": ..., "suggestions": [...], "tried": [...], "untried": [...]}`).

A saving is the whole run's (every operator of base and variant, re-measured in
interleaved rounds), as a share of the base run's energy on the base's own basis (per
step or per call): the only figure a suggestion rests on, so it is the only one shown.
"""

from __future__ import annotations

import shlex
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from magneton.diagnose.api import ranked
from magneton.model import Change, Profile, Tried


def _base_json(base: Profile) -> dict[str, Any]:
    return {
        "run": base.run.name,
        "script": base.run.script,
        "energy_j": base.run.energy_j,
        "time_s": base.run.time_s,
        "energy_method": base.run.energy_method,
        "power_source": base.run.power_source,
        "command": _base_command(base),
    }


def _base_command(base: Profile) -> str | None:
    """`python train.py ARGS` as the base was run; None for a script's setup()/main()."""
    from magneton.tracer.api import ProgramSpec

    spec = ProgramSpec.from_config(base.config)
    return spec.python_command() if spec is not None else None


def advice_json(base: Profile, tried: list[Tried], untried: list[Change], db: str) -> dict:
    suggestions = []
    for rank, t in enumerate(ranked(tried), 1):
        suggestions.append({"rank": rank, **t.to_json(), "explore": _explore(db, base, t)})
    return {
        "base": _base_json(base),
        "suggestions": suggestions,
        "tried": [t.to_json() for t in tried],
        "untried": [
            {
                "setting": c.setting,
                "kind": c.kind,
                "from_value": c.from_value,
                "value": c.value,
                "source": c.source,
            }
            for c in untried
        ],
    }


def _explore(db: str, base: Profile, t: Tried) -> str:
    return shlex.join(["magneton-tui", "--db", db, base.run.name, t.run]) if t.run else ""


def _interval(t: Tried) -> str:
    if t.saving_share is None or t.interval is None:
        return "-"
    lo, hi = t.interval
    return f"{t.saving_share:.1%} [{lo:.1%}, {hi:.1%}]"


def _fix(t: Tried) -> str:
    if t.command:
        return t.command
    if t.patch:
        return f"patch of {t.change.where or t.change.file}"
    return "-"


def print_advice(base: Profile, tried: list[Tried], untried: list[Change], db: str) -> None:
    con = Console(highlight=False, soft_wrap=True, emoji=False)
    if not con.is_terminal:  # piped or logged: wide enough that commands are not folded
        con.width = max(con.width, 140)
    method = base.run.energy_method or "?"
    con.print(
        f"base '{escape(base.run.name)}': {base.run.energy_j:.4g} J, {base.run.time_s * 1e3:.4g} ms "
        f"per unit ({method}); {len(tried)} variant(s) tried"
    )
    if not tried and not untried:
        con.print(
            "nothing to try: no flag, choice, environment variable, config key, module constant "
            "or rule-known API argument decides the operators holding the run's energy"
        )
        return
    rows = ranked(tried)
    if rows:
        t = Table(title="suggestions (saving: share of the base run's energy, 95% interval)")
        for col in ("#", "setting", "from → to", "saving", "confirmed", "same outputs", "fix"):
            t.add_column(col, overflow="fold")
        for k, r in enumerate(rows, 1):
            c = r.change
            t.add_row(
                str(k),
                escape(c.setting),
                escape(f"{c.from_value} → {c.value}"),
                _interval(r),
                "yes" if r.confirmed else "no",
                "yes" if r.same_outputs else "no",
                escape(_fix(r)),
            )
        con.print(t)
        for k, r in enumerate(rows, 1):
            con.print(f"#{k} {escape(r.change.setting)}: from {escape(r.change.source)}")
            if r.command:
                con.print(f"  run: {escape(r.command)}")
            if r.patch:
                con.print(escape(r.patch.rstrip()))
            con.print(f"  explore: {escape(_explore(db, base, r))}")
    else:
        con.print("no suggestion: no variant tried saved energy with the same outputs")
    rest = [r for r in tried if r.status != "suggested"]
    if rest:
        con.print("tried, not suggested:")
        for r in rest:
            why = r.error or r.first_difference or _interval(r)
            con.print(
                f"  {escape(r.change.describe())} ({escape(r.change.source)}): {r.status}; {escape(why)}"
            )
    if untried:
        con.print(f"left untried (--max-variants, --budget-s): {len(untried)}")
        for c in untried:
            con.print(f"  {escape(c.describe())} ({escape(c.source)})")
