"""Which library call issued each collective of a rank, and which collectives of two
ranks have no counterpart on the other side (the evidence of job diffs, jobdiff.py).

A collective's own stack says which torch API put it on the rank's schedule (the frames
relative to the installed torch package). Join is special: the k-th collective of a
process group is one collective on all its members, so when Join issued it on one rank
(a shadow all-reduce), its partners on the other ranks exist because of Join too although
nothing on their stacks says so (`job_causes`). Schedules are aligned by (operator,
issuing API) with a longest-matching-blocks diff, so one extra collective does not shift
every later one into a false mismatch.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from typing import Any

from magneton.model import OpRecord, Profile
from magneton.model.vocab import is_collective

# Frame files (relative to the torch package) whose functions issue collectives for a
# known API. Join's own file is the signature of case c9.
_JOIN_FILE = os.path.join("distributed", "algorithms", "join.py")
_DDP_FILE = os.path.join("nn", "parallel", "distributed.py")
JOIN_API = "torch.distributed.algorithms.join.Join"
# DistributedDataParallel methods that only run when DDP is inside a Join context (its
# join hook and the per-forward bookkeeping Join enables): collectives they issue exist
# because of Join even when no join.py frame is on their stack.
_DDP_JOIN_ONLY = frozenset(
    {
        "_check_global_requires_backward_grad_sync",
        "_match_all_reduce_for_bwd_pass",
        "_match_unused_params_allreduce",
        "_sync_final_model",
        "_find_common_rank",
        "main_hook",
        "post_hook",
    }
)


def _torch_rel(path: str) -> str | None:
    """Path relative to the installed torch package, or None for other files."""
    norm = path.replace("\\", "/")
    i = norm.rfind("/torch/")
    return norm[i + len("/torch/") :] if i >= 0 else None


@dataclass(frozen=True)
class Cause:
    api: str  # "torch.distributed.algorithms.join.Join", "torch.autograd.backward", ...
    phase: str  # what the call was doing (Join: shadow / notify / final-sync)


def collective_cause(p: Profile, op: OpRecord) -> Cause:
    """The library API whose call put this collective on the rank's schedule."""
    frames = [p.frames[i] for i in op.frames if 0 <= i < len(p.frames)]
    rels = [(_torch_rel(f.file), f) for f in frames]
    join_fns = [f.function for rel, f in rels if rel == _JOIN_FILE.replace(os.sep, "/")]
    ddp_fns = [f.function for rel, f in rels if rel == _DDP_FILE.replace(os.sep, "/")]
    if join_fns or any(fn in _DDP_JOIN_ONLY for fn in ddp_fns):
        if "notify_join_context" in join_fns:
            phase = "notify"  # per-iteration all-reduce Join adds to every DDP forward
        elif "post_hook" in ddp_fns or "_sync_final_model" in ddp_fns:
            phase = "final-sync"
        elif "__exit__" in join_fns:
            phase = "shadow"  # this rank ran out of data and shadows the others
        else:
            phase = "per-iteration"
        return Cause(JOIN_API, phase)
    for rel, f in rels:
        if rel is not None:
            mod = "torch." + rel.removesuffix(".py").replace("/", ".").removesuffix(".__init__")
            return Cause(f"{mod}.{f.function}", "")
    return Cause("(issued from C++)", "")


def job_causes(profiles: dict[int, Profile]) -> dict[int, dict[int, Cause]]:
    """rank -> {collective op idx: Cause}, with causes shared across ranks: the k-th
    collective of a process group is one collective on all its members, so when Join issued
    it on one rank (a shadow all-reduce), its partners on the other ranks (the DDP bucket
    all-reduces of the batches only they still had) exist because of Join too, although
    nothing on their own stacks says so."""
    from .ranks import timeline

    own: dict[int, dict[int, Cause]] = {}
    groups: dict[int, dict[str, list[int]]] = {}
    for r, p in profiles.items():
        own[r] = {op.idx: collective_cause(p, op) for op in p.ops if is_collective(op.name)}
        tl = timeline(p)
        group_of = {c.op: c.group for c in tl.collectives} if tl is not None else {}
        g: dict[str, list[int]] = {}
        for idx in own[r]:
            g.setdefault(group_of.get(idx, ""), []).append(idx)
        groups[r] = g
    out = {r: dict(c) for r, c in own.items()}
    names = {name for g in groups.values() for name in g}
    for name in names:
        members = {r: g[name] for r, g in groups.items() if name in g}
        if len(members) < 2 or len({len(v) for v in members.values()}) != 1:
            continue
        for k in range(len(next(iter(members.values())))):
            join = [
                (r, own[r][ops[k]]) for r, ops in members.items() if own[r][ops[k]].api == JOIN_API
            ]
            if not join:
                continue
            if len(join) == len(members) and all(c.phase == "shadow" for _, c in join):
                # every rank is in Join.__exit__: the final "has everyone joined?" check,
                # not a shadow of anyone's work
                for r, ops in members.items():
                    out[r][ops[k]] = Cause(JOIN_API, "all-joined check")
                continue
            src_rank, src = join[0]
            for r, ops in members.items():
                if own[r][ops[k]].api != JOIN_API:
                    out[r][ops[k]] = Cause(JOIN_API, f"partner of rank {src_rank} {src.phase}")
    return out


def _user_site(p: Profile, op: OpRecord) -> Any:
    """The innermost frame of the recorded script on the op's stack (where to look)."""
    script = os.path.realpath(p.run.script) if p.run.script else ""
    for i in reversed(op.frames):
        f = p.frames[i]
        if script and os.path.realpath(f.file) == script:
            return f
    return None


def _join_with_line(p: Profile, ops: list[OpRecord]) -> tuple[Any, str]:
    """(frame, code) of the user's `with Join(...)` statement: the script frame just
    outside Join.__exit__ on a shadow collective's stack (Python reports the exit call at
    the `with` line), checked - or, when no op passed through __exit__, found - with libcst
    by the qualified name of the context manager."""
    from ..source.index import source_index

    script = os.path.realpath(p.run.script) if p.run.script else ""
    for op in ops:
        frames = [p.frames[i] for i in op.frames]
        for k, f in enumerate(frames[:-1]):
            nxt = frames[k + 1]
            rel = _torch_rel(nxt.file)
            if (
                rel == _JOIN_FILE.replace(os.sep, "/")
                and nxt.function in ("__exit__", "__enter__")
                and os.path.realpath(f.file) == script
            ):
                idx = source_index(f.file)
                return f, idx.line_text(f.line) if idx is not None else ""
    idx = source_index(script) if script else None
    if idx is None:
        return None, ""
    import libcst as cst

    for node in idx.nodes_of(cst.With):
        for item in node.items:
            call = item.item
            if isinstance(call, cst.Call) and any(
                q == JOIN_API or q.endswith(".Join") for q in idx.qualified_names(call.func)
            ):
                line = idx.line_of(node)
                from magneton.model import FrameRecord

                return FrameRecord(idx=-1, file=script, line=line, function=""), idx.line_text(line)
    return None, ""


def _signature(p: Profile, op: OpRecord, causes: dict[int, Cause] | None) -> tuple[str, str]:
    c = (causes or {}).get(op.idx) or collective_cause(p, op)
    return (op.name, c.api + ("#" + c.phase if c.phase else ""))


def unmatched_collectives(
    pa: Profile,
    pb: Profile,
    causes_a: dict[int, Cause] | None = None,
    causes_b: dict[int, Cause] | None = None,
) -> tuple[list[int], list[int]]:
    """Collective op idx of A with no counterpart in B, and of B with none in A: the two
    schedules aligned by (operator, issuing API) with a longest-matching-blocks diff."""
    ca = [op for op in pa.ops if is_collective(op.name)]
    cb = [op for op in pb.ops if is_collective(op.name)]
    sa = [_signature(pa, op, causes_a) for op in ca]
    sb = [_signature(pb, op, causes_b) for op in cb]
    only_a: list[int] = []
    only_b: list[int] = []
    sm = difflib.SequenceMatcher(None, sa, sb, autojunk=False)
    for tag, i1, i2, j1, j2 in sm.get_opcodes():
        if tag in ("delete", "replace"):
            only_a.extend(op.idx for op in ca[i1:i2])
        if tag in ("insert", "replace"):
            only_b.extend(op.idx for op in cb[j1:j2])
    return only_a, only_b


def _companions(p: Profile, cause: Cause) -> list[int]:
    """For Join: every op its hooks ran (the zeros/ones/item around the shadow
    collectives), which exist only because of Join. (Partnered collectives bring no
    companions: the compute around them is the rank's own training.)"""
    if cause.api != JOIN_API:
        return []
    return [
        op.idx
        for op in p.ops
        if not is_collective(op.name) and collective_cause(p, op).api == JOIN_API
    ]
