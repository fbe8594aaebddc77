"""Energy breakdowns of one run: operator/module/kernel tables and the folded module tree.

`operator_table` is the per-operator energy table (calls, time, energy, J/call, avg W, share) grouped by
operator name, by the module an op ran in, or by the kernel that did the work.
`module_tree` is Smaragdine's energy distribution diagram (EDD): the module hierarchy with
inclusive energies, where repeated numbered blocks (`h.0 … h.11`, `layer_0 … layer_11`)
are folded into one node (`h.*`, `layer_*`) whose energy is the sum of the blocks - the
per-block view of a 48-layer model is unreadable and hides that the blocks are the cost.

A group of sibling segments is folded when they are indices (`3`, `layer_3`) numbered
0..n-1 with n >= 2, all of one module type: `conv1`/`conv2` are names, GPT-2's `ln_1`/`ln_2`
are two different norms, and the children of `Sequential(Linear, GELU, Linear)` are
different layers - none of them is repetition.

Average power is energy over *charged* time (the op's window plus its share of the time
between ops, the nearest-op rule of tracer/energy/session.py), so a view op next to a long
Python gap does not show hundreds of watts.

Interpreter time between aten operators (Python, mask building, hooks) is real energy
but not the next operator's: where the run's attribution kept it apart
(`Profile.energy.interp_j`, the CPU-priced model), the op and kernel tables show it as rows
of kind "python", one per source line that was running (the innermost frame of the
stack of the op it led to), named `python: file:line function`. The module grouping keeps
it in the module whose code ran it.

Every row carries the method its energy was obtained by; a row mixing methods says so
("replayed+measured"), so an estimate never passes for a measurement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

from magneton.model import OpRecord, Profile

ROOT_LABEL = "(root)"


@dataclass
class Row:
    name: str
    calls: int
    time_s: float
    energy_j: float
    j_per_call: float
    avg_w: float
    share: float
    method: str
    kind: str = "op"  # "op" | "python" (interpreter time between operators) | "other"

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "name": self.name,
            "calls": self.calls,
            "time_s": self.time_s,
            "energy_j": self.energy_j,
            "j_per_call": self.j_per_call,
            "avg_w": self.avg_w,
            "share": self.share,
            "method": self.method,
        }


def _method_label(energy_by_method: dict[str, float]) -> str:
    items = [(m or "unknown", e) for m, e in energy_by_method.items()]
    if not items:
        return ""
    items.sort(key=lambda kv: -abs(kv[1]))
    names = []
    for m, _ in items:
        if m not in names:
            names.append(m)
    return "+".join(names)


@dataclass
class _Acc:
    calls: float = 0.0
    time_s: float = 0.0
    energy_j: float = 0.0
    charged_s: float = 0.0
    methods: dict[str, float] = field(default_factory=dict)

    def add(
        self, calls: float, time_s: float, energy_j: float, method: str, charged_s: float = -1.0
    ) -> None:
        self.calls += calls
        self.time_s += time_s
        self.energy_j += energy_j
        self.charged_s += time_s if charged_s < 0 else charged_s
        self.methods[method] = self.methods.get(method, 0.0) + energy_j


def _run_total(profile: Profile) -> float:
    total = profile.run.energy_j
    if total <= 0:
        total = sum(op.energy_j for op in profile.ops)
    return total


def _kernel_shares(profile: Profile, op: OpRecord) -> list[tuple[str, float]]:
    """(kernel name, fraction) for one op; equal split among its kernels (no per-kernel
    timing on CPU); ops without kernels count under their own name."""
    names = [profile.kernels[k].name for k in op.kernels if 0 <= k < len(profile.kernels)]
    if not names:
        return [(op.name, 1.0)]
    f = 1.0 / len(names)
    return [(n, f) for n in names]


def operator_table(profile: Profile, by: str = "op") -> list[Row]:
    """Rows sorted by energy (descending). `by`: "op" | "module" | "kernel".

    Calls count ops per entry call (the profile holds one iteration); time and energy are
    per entry call, so the energies of all rows sum to the run's energy.
    """
    if by not in ("op", "module", "kernel"):
        raise ValueError(f"unknown grouping {by!r}: op, module or kernel")
    acc: dict[str, _Acc] = {}
    kinds: dict[str, str] = {}
    charged = charged_time_s(profile)
    interp = _interp(profile) if by != "module" else {}
    for op in profile.ops:
        c = charged.get(op.idx, op.time_s)
        if op.idx in interp:
            name, e_py, s_py = interp[op.idx]
            kinds[name] = "python"
            # no calls: a python row is not an operator (operator counts stay exact)
            acc.setdefault(name, _Acc()).add(0, s_py, e_py, op.energy_method, s_py)
            op = _without(op, e_py)
            c = max(0.0, c - s_py)
        if by == "op":
            acc.setdefault(op.name, _Acc()).add(1, op.time_s, op.energy_j, op.energy_method, c)
        elif by == "module":
            key = op.module or ROOT_LABEL
            acc.setdefault(key, _Acc()).add(1, op.time_s, op.energy_j, op.energy_method, c)
        else:
            for name, f in _kernel_shares(profile, op):
                acc.setdefault(name, _Acc()).add(
                    1, op.time_s * f, op.energy_j * f, op.energy_method, c * f
                )
    total = _run_total(profile)
    rows = []
    for name, a in acc.items():
        calls = int(round(a.calls))
        rows.append(
            Row(
                name=name,
                calls=calls,
                time_s=a.time_s,
                energy_j=a.energy_j,
                j_per_call=a.energy_j / calls if calls else 0.0,
                avg_w=a.energy_j / a.charged_s if a.charged_s > 0 else 0.0,
                share=a.energy_j / total if total else 0.0,
                method=_method_label(a.methods),
                kind=kinds.get(name, "op"),
            )
        )
    rows.sort(key=lambda r: (-r.energy_j, r.name))
    return rows


def _interp(profile: Profile) -> dict[int, tuple[str, float, float]]:
    """op idx -> (python row name, interpreter energy J, interpreter seconds) for the
    interpreter time that led to each op's call."""
    from .matching.interpreter import call_site_label

    vals = profile.energy.interp_j
    if len(vals) != len(profile.ops):
        return {}
    p_static = float((profile.energy.model or {}).get("p_static_w", 0.0))
    out = {}
    for op, e in zip(profile.ops, vals, strict=True):
        if e <= 0:
            continue
        where = call_site_label(profile, op)
        out[op.idx] = (f"python: {where}", float(e), float(e) / p_static if p_static else 0.0)
    return out


def _without(op: OpRecord, interp_j: float) -> OpRecord:
    """A view of `op` without its interpreter share (the row it goes to is python)."""
    return replace(op, energy_j=op.energy_j - interp_j, windows_ns=[])


def top_rows(rows: list[Row], top: int | None, total_j: float) -> list[Row]:
    """The first `top` rows plus one "(other N)" row holding the rest, so sums still hold."""
    if not top or top >= len(rows):
        return rows
    head, tail = rows[:top], rows[top:]
    acc = _Acc()
    for r in tail:
        charged = r.energy_j / r.avg_w if r.avg_w > 0 else r.time_s
        acc.add(r.calls, r.time_s, r.energy_j, r.method, charged)
    calls = int(acc.calls)
    return head + [
        Row(
            name=f"(other {len(tail)})",
            calls=calls,
            time_s=acc.time_s,
            energy_j=acc.energy_j,
            j_per_call=acc.energy_j / calls if calls else 0.0,
            avg_w=acc.energy_j / acc.charged_s if acc.charged_s > 0 else 0.0,
            share=acc.energy_j / total_j if total_j else 0.0,
            method=_method_label(acc.methods),
            kind="other",
        )
    ]


# ---------------------------------------------------------------------------------------
# Module tree (EDD)
# ---------------------------------------------------------------------------------------


@dataclass
class ModuleNode:
    name: str  # this segment ("h.*" folds show as "*"; the root shows its class)
    path: str  # qualified (folded) path, "" for the root
    type: str = ""
    energy_j: float = 0.0  # inclusive: ops in this module and all submodules
    self_energy_j: float = 0.0  # ops directly in this module
    time_s: float = 0.0
    calls: int = 0  # ops (inclusive)
    instances: int = 1  # blocks folded into this node
    share: float = 0.0
    method: str = ""
    children: list[ModuleNode] = field(default_factory=list)
    ops: dict[str, float] = field(default_factory=dict)  # op name -> self energy
    _methods: dict[str, float] = field(default_factory=dict, repr=False)

    def walk(self):
        yield self
        for c in self.children:
            yield from c.walk()

    def find(self, path: str) -> ModuleNode | None:
        for n in self.walk():
            if n.path == path:
                return n
        return None

    def to_json(self) -> dict:
        return {
            "path": self.path,
            "name": self.name,
            "type": self.type,
            "energy_j": self.energy_j,
            "self_energy_j": self.self_energy_j,
            "time_s": self.time_s,
            "calls": self.calls,
            "instances": self.instances,
            "share": self.share,
            "method": self.method,
        }


_NUMBERED = re.compile(r"^(.*?[_-]?)(\d+)$")


def _stem(seg: str) -> str | None:
    """ "3" -> "", "layer_3" -> "layer_", "conv1" -> None (a digit glued to a word is a
    name, not an index)."""
    if seg.isdigit():
        return ""
    m = _NUMBERED.match(seg)
    if m and m.group(1) and m.group(1)[-1] in "_-":
        return m.group(1)
    return None


def _foldable_groups(paths: set[str], types: dict[str, str]) -> set[str]:
    """Raw paths whose last segment is a repeated-block index: siblings with the same stem
    numbered 0..n-1 (n >= 2), all of one module type."""
    groups: dict[tuple[str, str], list[str]] = {}
    for p in paths:
        if not p:
            continue
        parent, _, seg = p.rpartition(".")
        stem = _stem(seg)
        if stem is not None:
            groups.setdefault((parent, stem), []).append(p)
    out: set[str] = set()
    for members in groups.values():
        kinds = {types.get(m, "") for m in members}
        # every member matched _NUMBERED (its stem is not None)
        idx = sorted(int(_NUMBERED.match(m.rpartition(".")[2]).group(2)) for m in members)  # type: ignore[union-attr]
        # blocks of a stack are numbered 0..n-1 (ModuleList, layer_0..); ln_1/ln_2 are not
        if len(members) >= 2 and len(kinds) == 1 and idx == list(range(len(idx))):
            out.update(members)
    return out


def fold_path(path: str, foldable: set[str]) -> str:
    """Fold repeated-block segments of a dotted module path (`h.3.mlp` -> `h.*.mlp`)."""
    if not path:
        return ""
    out = []
    raw = ""
    for seg in path.split("."):
        raw = f"{raw}.{seg}" if raw else seg
        if raw in foldable:
            out.append((_stem(seg) or "") + "*")
        else:
            out.append(seg)
    return ".".join(out)


def charged_time_s(profile: Profile) -> dict[int, float]:
    """Seconds charged to each op per entry call: its own window plus its share of the time
    between ops (the nearest-op rule of tracer/energy/session.py). Average power is energy over
    this time, so an op next to a long Python gap does not look hot.

    Attribution stores them in `profile.energy.charged_s`; without it, the first
    iteration's windows are re-tiled."""
    import numpy as np

    from magneton.tracer.timing.timeline import tile

    vals = profile.energy.charged_s
    if len(vals) == len(profile.ops) and vals:
        return {op.idx: float(v) for op, v in zip(profile.ops, vals, strict=True)}
    timed = [op for op in profile.ops if op.end_ns > op.start_ns]
    out = {op.idx: op.time_s for op in profile.ops}
    if not timed:
        return out
    ids = np.array([op.idx for op in timed])
    pcs = tile(
        ids,
        np.array([op.start_ns for op in timed], dtype=np.int64),
        np.array([op.end_ns for op in timed], dtype=np.int64),
    )
    gap: dict[int, float] = {}
    sel = ~pcs.own
    for i, a, b, w in zip(pcs.op[sel], pcs.a[sel], pcs.b[sel], pcs.weight[sel], strict=True):
        gap[int(i)] = gap.get(int(i), 0.0) + (b - a) / 1e9 * w
    for idx, g in gap.items():
        out[idx] = out.get(idx, 0.0) + g
    return out


def module_tree(profile: Profile, fold: bool = True) -> ModuleNode:
    """The module hierarchy with inclusive energies; repeated blocks folded when `fold`."""
    types = {m.name: m.type for m in profile.modules}
    paths = set(types) | {op.module for op in profile.ops}
    # every ancestor path counts (a module without ops of its own still groups children)
    for p in list(paths):
        while p:
            p = p.rpartition(".")[0]
            paths.add(p)
    foldable = _foldable_groups(paths, types) if fold else set()
    root = ModuleNode(name=types.get("", "") or ROOT_LABEL, path="", type=types.get("", ""))
    nodes: dict[str, ModuleNode] = {"": root}
    instances: dict[str, set[str]] = {}

    def node_for(path: str) -> ModuleNode:
        fpath = fold_path(path, foldable)
        if fpath in nodes:
            return nodes[fpath]
        segs_f = fpath.split(".")
        segs_raw = path.split(".")
        parent = node_for(".".join(segs_raw[:-1])) if len(segs_raw) > 1 else root
        n = ModuleNode(name=segs_f[-1], path=fpath, type=types.get(path, ""))
        parent.children.append(n)
        nodes[fpath] = n
        return n

    for p in sorted(paths):
        if p:
            n = node_for(p)
            instances.setdefault(n.path, set()).add(p)
    for op in profile.ops:
        n = node_for(op.module) if op.module else root
        n.self_energy_j += op.energy_j
        n.ops[op.name] = n.ops.get(op.name, 0.0) + op.energy_j
        # inclusive sums up the (folded) ancestry
        path = op.module
        chain = [n]
        while path:
            path = path.rpartition(".")[0]
            chain.append(node_for(path) if path else root)
        for c in chain:
            c.energy_j += op.energy_j
            c.time_s += op.time_s
            c.calls += 1
            c._methods[op.energy_method] = c._methods.get(op.energy_method, 0.0) + op.energy_j
    total = _run_total(profile)
    for n in root.walk():
        n.instances = max(1, len(instances.get(n.path, ())))
        n.share = n.energy_j / total if total else 0.0
        n.method = _method_label(n._methods)
        n.children.sort(key=lambda c: (-c.energy_j, c.name))
    return root


def flatten_tree(root: ModuleNode) -> list[dict]:
    """Depth-first list of module nodes (JSON-ready), the root first."""
    return [n.to_json() for n in root.walk()]
