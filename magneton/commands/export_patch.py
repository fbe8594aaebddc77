"""`magneton export-patch --db DIR A B --finding N [-o fix.patch] [--apply]`.

`--verify` tries the fix first (diagnose/fix/verify.py): the wasteful program recorded
from scratch copies with and without it, re-measured in interleaved rounds; the
verdict ("verified: saves 41% ± 3% ..." or "not verified: ...") is stored with the diff,
where every surface shows it.

Writes the patch of one diagnosed finding as a unified diff whose paths are relative to
the wasteful script's directory (git's a/ b/ prefixes), so `git apply` accepts it there.
Nothing is edited unless `--apply` is given; then the patch is checked first
(`git apply --check`) and applied with git, and the file is verified to hold exactly the
patched text.

Inside a git work tree, `git apply` reads patch paths relative to the *repository root*
and silently skips paths outside the current directory ("Skipped patch"), which would
report success without changing anything; `--apply` therefore runs from the top-level with
`--directory=<script dir relative to it>`, and the printed hint says the same.

What `--apply` may write is confined, whatever the stored diff says (a diff row is data
anyone who can write the DB can edit; one aimed at `~/.bashrc` was applied there):
the patch's folder (`fix.base_dir`) must lie inside the folder of a script that runs A
or B recorded, or inside that script's git repository; the patch must change exactly one
file, `fix.file`, which must be a file the recording read (the script, or a source file
in its recorded Python frames), and must neither create, delete, rename nor change the
mode of a file (git's own `--numstat --summary` reading of the patch is what is checked).
Stored diffs also carry a checksum (graphdb/matches.py `seal`): a row edited outside
Magneton is refused before any of this. The patch file `--apply` hands to git without
`-o` is a temporary file removed when the command ends. `-o FILE` never writes through
a symbolic link out of FILE's folder (graphdb/files.py: a `fix.patch` linked to a file
outside the repository overwrote that file).

The finding and its patch come from the stored diff (`magneton diff` stores its result),
the one the table, the HTML page and the TUI show: nothing is measured again unless
`--rerun` asks for a new diff (a patch exported from a second, re-measured diff could
belong to a differently numbered finding than the one the user read). Only when no diff
of A and B is stored does the diff pipeline (diagnose/pipeline.py) run now, and its
result is stored; a stored finding not yet diagnosed is diagnosed now (a re-run of both
scripts when the divergence is in Python). A and B may
name multi-rank jobs; their findings are numbered as `magneton diff` numbers them.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
from typing import TYPE_CHECKING

from magneton.diagnose.api import git_apply_command, git_toplevel
from magneton.model import Fix, MagnetonError

if TYPE_CHECKING:
    from magneton.graphdb import ProfileDB


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export-patch",
        help="write (and optionally apply) the fix of a diagnosed finding",
        description=(
            "Write the fix of finding N of `magneton diff A B` as a unified diff relative to "
            "the wasteful script's directory. Nothing is changed unless --apply is given."
        ),
    )
    p.add_argument("--db", required=True, help="profile DB directory")
    p.add_argument("a", help="run (or multi-rank job) A")
    p.add_argument("b", help="run (or multi-rank job) B")
    p.add_argument(
        "--finding", type=int, required=True, help="finding id (as `magneton diff` shows)"
    )
    p.add_argument("-o", "--output", default="-", help="patch file (default: stdout)")
    p.add_argument("--apply", action="store_true", help="apply the patch to the script with git")
    p.add_argument(
        "--rerun",
        action="store_true",
        help="diff anew and replace the stored diff (by default the stored diff's patch)",
    )
    p.add_argument(
        "--verify",
        action="store_true",
        help="try the fix: record the wasteful program from scratch copies with and without "
        "it, re-measure the two in interleaved rounds, and store what it saves",
    )
    p.add_argument(
        "--no-rerun",
        action="store_true",
        help="diagnose without re-running the scripts (static analysis only)",
    )
    p.set_defaults(func=run)


def _recorded_sources(db: ProfileDB, a: str, b: str) -> tuple[list[str], set[str]]:
    """The scripts that runs (or jobs) A and B recorded, and every file their recordings
    read (the scripts and the files of their recorded Python frames), as real paths."""
    names = [
        n
        for n, _ in db.query("MATCH (r:Run) RETURN r.name, r.script").rows
        if n in (a, b) or n.startswith((f"{a}/rank", f"{b}/rank"))
    ]
    rows = db.query("MATCH (r:Run) WHERE r.name IN $n RETURN r.script", {"n": names}).rows
    scripts = sorted({os.path.realpath(s) for (s,) in rows if s})
    frames = db.query("MATCH (f:Frame) WHERE f.run IN $n RETURN DISTINCT f.file", {"n": names}).rows
    read = set(scripts) | {os.path.realpath(f) for (f,) in frames if f and os.path.isabs(f)}
    return scripts, read


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def confine(db: ProfileDB, a: str, b: str, fix: Fix) -> str:
    """The file `--apply` may change for `fix` (a real path), or MagnetonError saying why
    the patch is refused (module docstring)."""
    scripts, read = _recorded_sources(db, a, b)
    if not scripts:
        raise MagnetonError(f"runs '{a}' and '{b}' recorded no script: nothing to apply to")
    base = os.path.realpath(fix.base_dir or "")
    roots: list[str] = []
    for s in scripts:
        folder = os.path.dirname(s)
        top = git_toplevel(folder) if os.path.isdir(folder) else None
        roots += [folder] + ([os.path.realpath(top)] if top else [])
    if not fix.base_dir or not any(_inside(base, r) for r in roots):
        raise MagnetonError(
            f"refused: the patch's folder {fix.base_dir!r} is outside the recorded scripts' "
            f"folders and repositories ({', '.join(sorted(set(roots)))})"
        )
    rel = fix.file or ""
    target = os.path.realpath(os.path.join(base, rel))
    if not rel or os.path.isabs(rel) or target not in read:
        raise MagnetonError(
            f"refused: the patch changes {rel or '(no file)'!r}, which is not a file the "
            f"recordings of '{a}' and '{b}' read"
        )
    return target


def _scripts_wasteful_first(db: ProfileDB, a: str, b: str, finding) -> list[str]:
    wasteful = a if finding.wasteful == "a" else b
    first = _recorded_sources(db, wasteful, wasteful)[0]
    return list(dict.fromkeys([*first, *_recorded_sources(db, a, b)[0]]))


def _not_utf8(scripts: list[str]) -> str:
    """Why a script may have no patch: fixes are made by rewriting its source, read in
    the encoding it declares (PEP 263, UTF-8 without a coding line), and a script whose
    bytes are not text in it lost its patch without a word of it."""
    from magneton.diagnose.api import read_source

    for script in scripts:
        try:
            read_source(script)
        except OSError:
            continue
        except ValueError as e:  # Undecodable: which byte, and what was declared
            return (
                f"; {e}, and patches are made only for source that can be read: add its "
                "coding line or save it as UTF-8, then diff again with --rerun"
            )
    return ""


def _patch_touches(patch_file: str, cwd: str) -> list[str]:
    """What git would do with the patch, one line per changed file and per create,
    delete, rename or mode change (`git apply --numstat --summary`; nothing is changed)."""
    res = subprocess.run(
        ["git", "apply", "--numstat", "--summary", os.path.abspath(patch_file)],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        msg = (res.stderr or res.stdout).strip().splitlines()
        raise MagnetonError(f"git apply refused the patch: {msg[0] if msg else 'unknown error'}")
    return [line for line in res.stdout.splitlines() if line.strip()]


def find_finding(db: ProfileDB, a: str, b: str, fid: int, rerun: bool, fresh: bool = False):
    """Finding `fid` of the stored diff of A and B (a new diff when `fresh` or none is
    stored), diagnosed."""
    from magneton.diagnose.api import (
        diagnose_findings,
        is_job,
        run_diff,
        store_diagnosis,
        store_outcome,
    )
    from magneton.graphdb import load_diff

    job = is_job(db, a)
    loaded = None if job or fresh else load_diff(db, a, b)
    if loaded is not None:
        result = loaded[0]
    else:
        out = run_diff(db, a, b, rerun=rerun)
        store_outcome(db, out)
        result = out.result
    ids = [f.id for f in result.findings]
    finding = next((f for f in result.findings if f.id == fid), None)
    if finding is None:
        raise MagnetonError(
            f"no finding {fid} in the diff of '{a}' and '{b}' "
            f"(findings: {', '.join(map(str, ids)) if ids else 'none'})"
        )
    if finding.fix is None and not job:
        diagnose_findings(db, result, [finding], rerun=rerun)
        store_diagnosis(db, result)  # the next export-patch of this diff reuses it
    return result, finding


def run(args: argparse.Namespace) -> int:
    from magneton.graphdb import open_db

    with open_db(args.db, create=False) as db:
        result, finding = find_finding(
            db, args.a, args.b, args.finding, not args.no_rerun, fresh=args.rerun
        )
        if args.verify:
            _verify(db, result, finding)
        fix = finding.fix or Fix()
        target = confine(db, args.a, args.b, fix) if args.apply and fix.patch else ""
        scripts = [] if fix.patch else _scripts_wasteful_first(db, args.a, args.b, finding)
    patch = fix.patch
    summary = fix.summary or "no fix"
    if not patch:
        print(f"finding {finding.id}: {summary}", file=sys.stderr)
        raise MagnetonError(
            f"finding {finding.id} has no mechanical patch (see the summary above)"
            + _not_utf8(scripts),
            exit_code=1,
        )
    base = fix.base_dir or ""
    # the patch in the file's own encoding: `git apply` matches its lines byte for byte
    from magneton.diagnose.api import patch_encoding

    encoding = patch_encoding(os.path.join(base, fix.file)) if fix.file else "utf-8"
    if args.output == "-":
        sys.stdout.write(patch)
        patch_file = None
    else:  # never through a link out of the folder named (graphdb/files.py)
        from magneton.graphdb import write_confined

        write_confined(args.output, patch, encoding=encoding)
        patch_file = args.output
        argv, cwd = git_apply_command(base, patch_file)
        print(f"wrote {args.output}: {summary}", file=sys.stderr)
        print(f"apply with: (cd {cwd} && {' '.join(argv)})", file=sys.stderr)
    if not args.apply:
        return 0
    if patch_file is not None:
        return _apply(base, patch_file, fix, target)
    import tempfile

    fd, tmp = tempfile.mkstemp(prefix="magneton-", suffix=".patch")
    try:  # removed however the command ends (it was left behind in /tmp)
        with os.fdopen(fd, "w", encoding=encoding) as fh:
            fh.write(patch)
        return _apply(base, tmp, fix, target)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def _verify(db: ProfileDB, result, finding) -> None:
    """Try the finding's fix (diagnose/fix/verify.py), say what it saves, and store it
    with the diff: the table, the HTML page and the TUI show it from there."""
    from magneton.diagnose.api import store_diagnosis, verify_fix

    run = result.a.run if finding.wasteful == "a" else result.b.run
    print(f"finding {finding.id}: trying its fix on '{run}' ...", file=sys.stderr)
    v = verify_fix(db.load_profile(run), finding, result.threshold)
    print(f"finding {finding.id}: {v.line()}", file=sys.stderr)
    if finding.fix is not None:
        finding.fix.verification = v
        store_diagnosis(db, result)


def _apply(base: str, patch_file: str, fix: Fix, target: str) -> int:
    """Check that the patch changes `fix.file` and nothing else, then apply it with git
    and verify the file changed."""
    touched = _patch_touches(patch_file, base)
    if len(touched) != 1 or touched[0].split("\t")[2:] != [fix.file]:
        raise MagnetonError(
            f"refused: the patch must change {fix.file!r} only, but git reads it as: "
            + "; ".join(line.strip() for line in touched)
        )
    before = _bytes(target)
    for check in (True, False):
        argv, cwd = git_apply_command(base, patch_file, check=check)
        res = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, check=False)
        if res.returncode != 0:
            msg = (res.stderr or res.stdout).strip().splitlines()
            raise MagnetonError(
                f"git apply {'--check ' if check else ''}refused the patch: "
                f"{msg[0] if msg else 'unknown error'}"
            )
    after = _bytes(target)
    if after is None or after == before:
        raise MagnetonError(f"git apply reported success but {target} did not change")
    print(f"applied to {target}", file=sys.stderr)
    return 0


def _bytes(path: str) -> bytes | None:
    """The file's bytes (compared before and after: a script need not be UTF-8)."""
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as fh:
        return fh.read()
