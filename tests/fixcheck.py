"""`assert_no_noop_fix`: the end-to-end tests' check that no finding's fix changes nothing.

A fix whose new text equals its old text (a patch that removes and re-adds the same lines,
"change X from A to A", "Replace a.py:24 with the efficient side's code (b.py:24)" where the
two lines read the same, "run with `--x v`" when the wasteful run already used v) sends a
user to apply something that cannot help. The check reads what a user reads: the JSON of
`magneton diff --json` (or the typed findings) and the files the fix names.
"""

from __future__ import annotations

import os
import re
from typing import Any

_CHANGE = re.compile(r"change .+? from (.+?) to (.+?) \(the value")
_REPLACE = re.compile(
    r"Replace (\S+?):(\d+)(?:-(\d+))? with the efficient side's code \((\S+?):(\d+)(?:-(\d+))?\)"
)
_RUN_WITH = re.compile(r"Run with `(\S+) (.+?)` .*used `\S+ (.+?)`")
_RUN_WITH_ENV = re.compile(r"Run with (\S+?)=(\S+) as the efficient run did \(it was (.+?)\)")
_RUN_ENV_COMMAND = re.compile(r"Run `(\w+)=(\S+) .*?` as the efficient run did \(\1 was (.+?)\)")


def _norm(text: str) -> str:
    return " ".join(text.replace('"', "'").split())


def _lines(path: str, first: int, last: int) -> str:
    with open(path, encoding="utf-8") as f:
        return "".join(f.readlines()[first - 1 : last])


def _as_dict(finding: Any) -> dict:
    return finding if isinstance(finding, dict) else finding.to_json()


def noop_reason(finding: Any) -> str:
    """Why this finding's fix is a no-op, or '' when it is not."""
    f = _as_dict(finding)
    fix = f.get("fix") or {}
    summary = fix.get("summary") or ""
    patch = fix.get("patch")
    if patch:
        removed = [
            ln[1:] for ln in patch.splitlines() if ln.startswith("-") and not ln.startswith("---")
        ]
        added = [
            ln[1:] for ln in patch.splitlines() if ln.startswith("+") and not ln.startswith("+++")
        ]
        if _norm("\n".join(removed)) == _norm("\n".join(added)):
            return f"patch changes nothing: {patch}"
    m = _CHANGE.search(summary)
    if m and _norm(m.group(1)) == _norm(m.group(2)):
        return f"changes a value to itself: {summary}"
    m = _RUN_WITH.search(summary) or _RUN_WITH_ENV.search(summary)
    m = m or _RUN_ENV_COMMAND.search(summary)
    if m and _norm(m.group(2)) == _norm(m.group(3)):
        return f"runs with the option the wasteful run already used: {summary}"
    m = _REPLACE.search(summary)
    if m:
        base = fix.get("base_dir") or ""
        wa, w1, w2, eb, e1, e2 = m.groups()
        wpath = wa if os.path.isabs(wa) else os.path.join(base, wa)
        epath = os.path.join(os.path.dirname(wpath), eb)
        if os.path.isfile(wpath) and os.path.isfile(epath):
            old = _lines(wpath, int(w1), int(w2 or w1))
            new = _lines(epath, int(e1), int(e2 or e1))
            if _norm(old) == _norm(new):
                return f"replaces code with the same code ({old.strip()!r}): {summary}"
    return ""


def assert_no_noop_fix(findings: list[Any]) -> None:
    """Every finding's fix changes something (or says that no mechanical fix exists)."""
    bad = [(_as_dict(f).get("id"), r) for f in findings if (r := noop_reason(f))]
    assert not bad, f"no-op fixes: {bad}"


def direction_reason(finding: Any, findings: list[Any]) -> str:
    """Why this finding's fix would move its wasteful side away from what the efficient
    side did, or '' when it would not: the value it sets is not the efficient side's, or
    it undoes a larger finding that blames the same variable from the other side."""
    f = _as_dict(finding)
    fix, rc = f.get("fix") or {}, f.get("root_cause") or {}
    if not (fix.get("patch") or fix.get("command")):
        return ""
    efficient = "b" if f["wasteful"] == "a" else "a"
    eff = (rc.get("values") or {}).get(efficient)
    to = (fix.get("sets") or {}).get("to")
    if to is not None and eff is not None and _norm(to).strip("'") != _norm(eff).strip("'"):
        return f"sets {rc.get('variable')} to {to}, the efficient side has {eff}"
    for g in map(_as_dict, findings):
        grc = g.get("root_cause") or {}
        if (
            g.get("id") != f.get("id")
            and rc.get("variable")
            and grc.get("variable") == rc.get("variable")
            and g["wasteful"] != f["wasteful"]
            and g["saving_j"] > f["saving_j"]
        ):
            return f"undoes finding {g.get('id')} ({rc.get('variable')})"
    return ""


def assert_forward_fixes(findings: list[Any]) -> None:
    """Every fix moves its wasteful side toward the efficient side (diagnose/fix/direction.py)."""
    bad = [(_as_dict(f).get("id"), r) for f in findings if (r := direction_reason(f, findings))]
    assert not bad, f"fixes that go the wrong way: {bad}"
