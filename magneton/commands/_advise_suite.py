"""`magneton eval --advise CASES_DIR`: the one-program corpus (examples/advise/).

Each case directory holds one program or script, the wasteful side of an upstream
report, and `expect.toml`: `kind`, `setting` and `value` (the efficient value as text),
and an `[advise]` table with either `command` (the program's argument list, run from
the case directory), `steps` and optional `env`, or `script` (a file with setup() and
main()). A control (`control = true`) is the efficient side of a case: its `value` is
the wasteful one, which must not be suggested.

For each case the base is recorded as `magneton record` records it (in its own
process, with the case's environment), then `magneton advise` tries its changes in
this process with the case's environment set. A case is **found** when a suggestion
(confirmed, same outputs) sets `setting` to `value`, **among the first three** when it
ranks there, and every suggested command line must parse with the program's own parser
and every patch must apply (`git apply` to a copy of the case): a suggestion that
cannot be used counts as not found. A control's suggestion of the known waste is a
**false suggestion**.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from magneton.model import MagnetonError, Tried

from ._cases import command_refusal, load_expect, record


@dataclass
class AdviseCaseResult:
    case: str
    kind: str = ""
    expected: str = ""
    control: bool = False
    found: bool = False
    rank: int | None = None  # 1-based rank of the expected setting among the suggestions
    suggestions: list[str] | None = None
    tried: int = 0
    reason: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        if self.control:
            return not self.found and not self.reason
        return self.found and self.rank is not None and self.rank <= 3

    def to_json(self) -> dict:
        return {
            "case": self.case,
            "kind": self.kind,
            "expected": self.expected,
            "control": self.control,
            "found": self.found,
            "rank": self.rank,
            "ok": self.ok,
            "suggestions": self.suggestions or [],
            "tried": self.tried,
            "reason": self.reason,
            "seconds": round(self.seconds, 1),
        }


def advise_cases(root: str, only: list[str] | None = None) -> list[Path]:
    base = Path(root)
    if not base.is_dir():
        raise MagnetonError(f"no such case directory: {root}")
    out = [
        d
        for d in sorted(base.iterdir())
        if (d / "expect.toml").is_file() and "advise" in load_expect(d)
    ]
    if only:
        out = [d for d in out if d.name in only]
    if not out:
        raise MagnetonError(f"no advise cases (expect.toml with [advise]) in {root}")
    return out


@contextlib.contextmanager
def _environment(env: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def eval_advise_case(case: Path, db_dir: str, max_variants: int) -> AdviseCaseResult:
    from magneton.diagnose.api import ranked

    from .advise import advise

    expect = load_expect(case)
    adv = expect["advise"]
    res = AdviseCaseResult(
        case=case.name,
        kind=str(expect.get("kind", "")),
        expected=f"{expect.get('setting')} = {expect.get('value')}",
        control=bool(expect.get("control", False)),
    )
    db = os.path.abspath(os.path.join(db_dir, case.name))
    env = {k: str(v) for k, v in (adv.get("env") or {}).items()}
    t0 = time.perf_counter()
    try:
        if "script" in adv:
            record([str(case / adv["script"])], db, "base", ["--repeat", str(adv.get("repeat", 3))])
        else:
            argv = [str(w) for w in adv["command"]]
            steps = ["--steps", str(adv.get("steps", "1:1:9"))]
            record([], db, "base", [*steps, "--", "python", *argv], cwd=case, env=env)
        with _environment(env):
            _, tried, _ = advise(db, "base", max_variants, quiet=True)
    except MagnetonError as e:
        res.reason, res.seconds = str(e), time.perf_counter() - t0
        return res
    res.seconds = time.perf_counter() - t0
    res.tried = len(tried)
    sug = ranked(tried)
    res.suggestions = [f"{t.change.setting} = {t.change.value}" for t in sug]
    for k, t in enumerate(sug, 1):
        if t.change.setting == expect.get("setting") and t.change.value == str(expect.get("value")):
            res.found, res.rank = True, k
            break
    problems = [p for t in sug if (p := _unusable(case, t))]
    res.reason = "; ".join(problems)
    if not res.found and not res.control:
        res.reason = res.reason or _why_not(tried, expect)
    return res


def _unusable(case: Path, t: Tried) -> str:
    """Why a suggestion cannot be used as printed ('' when it can)."""
    if t.command:
        why = command_refusal(case, t.command)
        if why:
            return f"{t.change.setting}: command does not parse ({why})"
    if t.patch:
        with tempfile.TemporaryDirectory(prefix="magneton-eval-") as tmp:
            work = Path(tmp) / case.name
            shutil.copytree(case, work)
            (Path(tmp) / "fix.patch").write_text(t.patch)
            ran = subprocess.run(
                ["git", "apply", str(Path(tmp) / "fix.patch")],
                cwd=work,
                capture_output=True,
                text=True,
            )
            if ran.returncode != 0:
                return f"{t.change.setting}: patch does not apply ({' '.join(ran.stderr.split())[:160]})"
    return ""


def _why_not(tried: list[Tried], expect: dict) -> str:
    mine = [t for t in tried if t.change.setting == expect.get("setting")]
    if not mine:
        return "the expected setting was not proposed" + (
            f" (tried: {', '.join(t.change.setting for t in tried)})"
            if tried
            else " (nothing proposed)"
        )
    t = mine[0]
    what = t.error or t.first_difference
    if t.saving_share is not None and t.interval is not None:
        what = f"{t.saving_share:.1%} [{t.interval[0]:.1%}, {t.interval[1]:.1%}]"
    return f"{t.change.describe()}: {t.status}" + (f" ({what})" if what else "")


def print_advise_table(results: list[AdviseCaseResult]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title="Magneton advise corpus (one program each)")
    for col in ("case", "kind", "expected", "ok", "rank", "suggestions", "reason"):
        t.add_column(col, overflow="fold")
    for r in results:
        t.add_row(
            r.case + (" (control)" if r.control else ""),
            r.kind,
            r.expected,
            "[green]✓[/]" if r.ok else "[red]✗[/]",
            "-" if r.rank is None else str(r.rank),
            ", ".join(r.suggestions or []) or "-",
            r.reason,
        )
    con = Console(emoji=False)
    con.print(t)
    cases = [r for r in results if not r.control]
    controls = [r for r in results if r.control]
    con.print(
        f"found {sum(r.found for r in cases)} of {len(cases)}; among the first three "
        f"{sum(r.ok for r in cases)} of {len(cases)}; false suggestions "
        f"{sum(r.found for r in controls)} in {len(controls)} control(s)"
    )
