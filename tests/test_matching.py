"""Differential matching (diagnose/matching/match.py) and detection (diagnose/matching/detect.py) on runs
recorded with the real recorder (`record_callable`, no DB): which operators of one run
are paired with which of the other, and what gets flagged."""

from __future__ import annotations

import itertools
import math
import random

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from magneton.diagnose.matching.detect import detect
from magneton.diagnose.matching.diff import diff_profiles
from magneton.diagnose.matching.match import FREE_OPS, align, build_graph, match_runs
from magneton.model import MagnetonError, Profile
from magneton.tracer.programs.record import RecordOptions, record_callable

OPTS = RecordOptions(warmup=0, repeat=1, power="model", call_paths=False)


def record(fn, *args, run: str = "r") -> Profile:
    with torch.no_grad():
        return record_callable(fn, args, run=run, options=OPTS)


def work_energy(p: Profile) -> Profile:
    """Deterministic per-op energy (bytes moved) so detection tests do not depend on the
    timing noise of a shared CPU."""
    for op in p.ops:
        op.energy_j = 1e-9 * sum(p.tensors[t].numel for t in op.inputs + op.outputs)
        op.time_s = op.energy_j / 100.0
    p.run.energy_j = sum(op.energy_j for op in p.ops)
    return p


def names(p: Profile, ops: list[int], keep_free: bool = False) -> list[str]:
    out = [p.ops[o].name for o in ops]
    return out if keep_free else [n for n in out if n not in FREE_OPS]


def pair_names(pa: Profile, pb: Profile, m) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    return [(tuple(names(pa, rp.a.ops)), tuple(names(pb, rp.b.ops))) for rp in m.pairs]


# --------------------------------------------------------------------------------------
# alignment (the increasing-subsequence step of the dominator-path matching)
# --------------------------------------------------------------------------------------


@settings(max_examples=80, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), max_size=12, unique=True))
def test_align_finds_a_longest_increasing_pairing(pairs):
    cand = [(i, j, 0.0) for i, j in pairs]
    got = align(cand)
    chosen = [cand[q][:2] for q in got]
    assert all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(chosen))
    best = 0
    for r in range(len(pairs), 0, -1):
        if any(
            all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(sorted(c)))
            for c in itertools.combinations(pairs, r)
        ):
            best = r
            break
    assert len(chosen) == best


def test_align_prefers_the_better_pair_among_equally_long_ones():
    cand = [(0, 0, 0.0), (0, 1, 0.9), (1, 1, 0.0)]
    assert [cand[q] for q in align(cand)] == [(0, 0, 0.0), (1, 1, 0.0)]
    cand = [(0, 0, 0.1), (0, 1, 0.9)]
    assert [cand[q] for q in align(cand)] == [(0, 1, 0.9)]


# --------------------------------------------------------------------------------------
# random programs: one op replaced by an equivalent chain is paired with that chain
# --------------------------------------------------------------------------------------

W = torch.randn(8, 8, generator=torch.Generator().manual_seed(7)) / math.sqrt(8)

# (name, arity, original, equivalent chain) — chains are 2-4 ops, equal up to rounding
OPS = {
    "tanh": (1, torch.tanh, lambda a: 2 * torch.sigmoid(2 * a) - 1),
    "sin": (1, torch.sin, lambda a: torch.cos(a - math.pi / 2)),
    "scale": (1, lambda a: a * 1.5, lambda a: (a * 0.75) * 2),
    "add": (2, torch.add, lambda a, b: a - (-b)),
    "proj": (1, lambda a: a @ W, lambda a: (a.unsqueeze(-1) * W).sum(-2)),
    "mul": (2, torch.mul, None),
}


@st.composite
def programs(draw):
    n = draw(st.integers(3, 9))
    prog = []
    for k in range(n):
        name = draw(st.sampled_from(sorted(OPS)))
        arity = OPS[name][0]
        args = [draw(st.integers(0, k)) for _ in range(arity)]  # 0 = input, k = step k-1
        prog.append((name, args))
    replaceable = [k for k, (name, _) in enumerate(prog) if OPS[name][2] is not None]
    if not replaceable:
        prog.append(("tanh", [n]))
        replaceable = [n]
    return prog, draw(st.sampled_from(replaceable))


def run_program(prog, replace: int | None):
    def fn(x):
        vals = [x]
        for k, (name, args) in enumerate(prog):
            _, f, chain = OPS[name][0], OPS[name][1], OPS[name][2]
            vals.append((chain if k == replace else f)(*(vals[a] for a in args)))
        return vals[-1]

    return fn


@settings(max_examples=15, deadline=None, derandomize=True)
@given(programs(), st.integers(0, 1000))
def test_replaced_op_is_paired_with_its_equivalent_chain(case, seed):
    prog, k = case
    x = torch.randn(4, 8, generator=torch.Generator().manual_seed(seed))
    pa = record(run_program(prog, None), x, run="a")
    pb = record(run_program(prog, k), x, run="b")
    m = match_runs(pa, pb)
    # every original step is one aten op, so step k is op k of A; in B the chain
    # replacing it starts at op k
    assert len(pa.ops) == len(prog)
    chain = list(range(k, k + len(pb.ops) - len(pa.ops) + 1))
    want_a, want_b = names(pa, [k]), names(pb, chain)
    found = [rp for rp in m.pairs if k in rp.a.ops]
    assert len(found) == 1, pair_names(pa, pb, m)
    rp = found[0]
    assert set(chain) <= set(rp.b.ops)
    # the region may also hold aliasing ops, but no other work from elsewhere
    assert names(pa, rp.a.ops) == want_a, pair_names(pa, pb, m)
    assert names(pb, rp.b.ops) == want_b, pair_names(pa, pb, m)
    # every op of both runs is in exactly one region
    for p, side in ((pa, "a"), (pb, "b")):
        cover = [o for rp in m.pairs for o in getattr(rp, side).ops]
        unmatched = m.unmatched_ops_a if side == "a" else m.unmatched_ops_b
        assert len(cover) == len(set(cover))
        assert set(cover) | set(unmatched) == {op.idx for op in p.ops}


# --------------------------------------------------------------------------------------
# targeted cases
# --------------------------------------------------------------------------------------


def mlp(x, w1, w2):
    h = torch.nn.functional.gelu(x @ w1)
    return torch.tanh(h @ w2)


def test_identical_runs_pair_every_op_with_itself():
    g = torch.Generator().manual_seed(0)
    x, w1, w2 = (
        torch.randn(4, 16, generator=g),
        torch.randn(16, 32, generator=g),
        torch.randn(32, 16, generator=g),
    )
    pa, pb = record(mlp, x, w1, w2, run="a"), record(mlp, x, w1, w2, run="b")
    m = match_runs(pa, pb)
    assert m.pairs and not m.unmatched_ops_a and not m.unmatched_ops_b
    for rp in m.pairs:
        assert names(pa, rp.a.ops, True) == names(pb, rp.b.ops, True)
    assert [o for rp in m.pairs for o in rp.a.ops] == [op.idx for op in pa.ops]
    pa, pb = work_energy(pa), work_energy(pb)
    assert detect(pa, pb, m) == []


def test_redundant_copy_is_a_region_with_an_empty_counterpart():
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(32, 64, generator=g), torch.randn(64, 48, generator=g)

    def copying(x, w):
        y = (x @ w).t().contiguous()
        return torch.tanh(y).sum(0)

    def direct(x, w):
        return torch.tanh((x @ w).t()).sum(0)

    pa = work_energy(record(copying, x, w, run="a"))
    pb = work_energy(record(direct, x, w, run="b"))
    m = match_runs(pa, pb)
    empty = [rp for rp in m.pairs if rp.kind == "empty-b"]
    assert len(empty) == 1
    assert "aten::clone" in names(pa, empty[0].a.ops)
    assert empty[0].b.ops == [] and empty[0].b.inputs == empty[0].b.outputs
    found = detect(pa, pb, m)
    assert len(found) == 1 and found[0].wasteful == "a" and found[0].verdict == "waste"
    assert found[0].ops_b == [] and "aten::clone" in found[0].ops_a


def test_repeated_identical_values_are_paired_by_position():
    """Zero tensors appear in two layers of both runs (computed differently); each
    must be paired within its own layer, not crossed."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(4, 16, generator=g), torch.randn(16, 16, generator=g) / 4

    def prog(zero):
        def fn(x, w):
            h = x
            for _ in range(2):
                h = torch.tanh(h @ w)
                h = h + zero(h)
            return h

        return fn

    pa = record(prog(lambda h: h * 0.0), x, w, run="a")
    pb = record(prog(lambda h: h - h), x, w, run="b")
    m = match_runs(pa, pb)
    zero_pairs = [rp for rp in m.pairs if names(pa, rp.a.ops) == ["aten::mul"]]
    assert len(zero_pairs) == 2
    for rp in zero_pairs:
        assert names(pb, rp.b.ops) == ["aten::sub"]
    # in execution order on both sides: layer 1 with layer 1, layer 2 with layer 2
    first, second = sorted(zero_pairs, key=lambda rp: rp.a.ops[0])
    assert first.b.ops[0] < second.b.ops[0]


def test_dominator_path_cuts_a_chain_at_every_value():
    x = torch.randn(8, 8, generator=torch.Generator().manual_seed(0))

    def chain(x):
        return torch.exp(torch.sin(torch.tanh(x) * 2.0) + 1.0)

    pa, pb = record(chain, x, run="a"), record(chain, x, run="b")
    g = build_graph(pa)
    # every op of a chain dominates the sink
    v, path = g.idom[-2], []
    while v != -1:
        path.append(v)
        v = g.idom[v]
    assert {op.idx for op in pa.ops} <= set(path)
    m = match_runs(pa, pb)
    assert len(m.pairs) == len(pa.ops)


def test_eager_and_sdpa_attention_pair_the_attention_math_with_the_fused_op():
    from transformers import GPT2Config, GPT2Model

    ids = torch.randint(0, 1000, (2, 16), generator=torch.Generator().manual_seed(1))

    def model(attn):
        torch.manual_seed(0)
        cfg = GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=1000)
        return GPT2Model._from_config(cfg, attn_implementation=attn).eval()

    def fwd(m, ids):
        return m(ids).last_hidden_state

    pa = record(fwd, model("eager"), ids, run="eager")
    pb = record(fwd, model("sdpa"), ids, run="sdpa")
    m = match_runs(pa, pb)
    assert not m.unmatched_ops_a and not m.unmatched_ops_b
    fused = [rp for rp in m.pairs if any("scaled_dot_product" in n for n in names(pb, rp.b.ops))]
    assert len(fused) == 2  # one per layer
    for rp in fused:
        a_names = names(pa, rp.a.ops)
        assert "aten::_softmax" in a_names and "aten::bmm" in a_names
        assert not any("scaled_dot_product" in n for n in a_names)
    # the MLP/GELU regions stay one-to-one
    assert sum(1 for na, nb in pair_names(pa, pb, m) if na == nb == ("aten::tanh",)) == 2


def test_runs_with_different_inputs_get_a_message_not_findings():
    g = torch.Generator().manual_seed(0)
    x1, x2, w1, w2 = (torch.randn(*s, generator=g) for s in ((4, 16), (4, 16), (16, 32), (32, 16)))
    pa = work_energy(record(mlp, x1, w1, w2, run="a"))
    pb = work_energy(record(mlp, x2, w1, w2, run="b"))
    res, _ = diff_profiles(pa, pb)
    assert "different inputs" in res.message and res.findings == [] and res.matched_pairs == 0


def test_unrelated_programs_have_nothing_in_common():
    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(0))
    pa = work_energy(record(lambda x: torch.sin(x).cumsum(0), x, run="a"))
    pb = work_energy(record(lambda x: torch.exp(x).softmax(-1), x, run="b"))
    res, _ = diff_profiles(pa, pb)
    assert res.message.startswith("nothing in common") and not res.findings


def test_threshold_below_five_percent_is_refused():
    x = torch.randn(4, 4)
    p = record(torch.tanh, x)
    with pytest.raises(MagnetonError, match="threshold"):
        diff_profiles(p, p, threshold=0.01)


def test_detection_flags_folds_ranks_and_judges():
    """Two layers with a costlier GELU on one side are folded into one finding; a side
    that is cheaper but slower is a trade-off, not waste."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(8, 32, generator=g), torch.randn(32, 32, generator=g) / 6

    def prog(act):
        def fn(x, w):
            h = x
            for _ in range(2):
                h = act(h @ w)
            return h

        return fn

    def gelu_tanh_by_hand(h):
        return 0.5 * h * (1 + torch.tanh(math.sqrt(2 / math.pi) * (h + 0.044715 * h**3)))

    pa = work_energy(record(prog(gelu_tanh_by_hand), x, w, run="a"))
    pb = work_energy(
        record(prog(lambda h: torch.nn.functional.gelu(h, approximate="tanh")), x, w, run="b")
    )
    m = match_runs(pa, pb)
    found = detect(pa, pb, m)
    assert len(found) == 1
    f = found[0]
    assert f.occurrences == 2 and f.wasteful == "a" and f.verdict == "waste"
    assert f.ops_b == ["aten::gelu", "aten::gelu"] and "aten::tanh" in f.ops_a
    assert f.saving_j == pytest.approx(f.region_a.energy_j - f.region_b.energy_j)
    assert 0 < f.saving_share < 1 and f.output_rel_diff < 1e-3
    # make the efficient side slower: same finding, now a trade-off
    for o in f.region_b.ops:
        pb.ops[o].time_s = 10.0
    assert detect(pa, pb, m)[0].verdict == "trade-off"
    # below the tiny-region floor nothing is flagged
    for o in f.region_a.ops:
        pa.ops[o].energy_j = 1e-30
    for o in f.region_b.ops:
        pb.ops[o].energy_j = 2e-30
    assert detect(pa, pb, m) == []


def test_parameters_match_by_value_not_identity():
    """Two runs of one architecture with separately constructed (same-seed) weights
    are matched even though no tensor object is shared."""

    def build():
        torch.manual_seed(3)
        return torch.nn.Sequential(
            torch.nn.Linear(16, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)
        ).eval()

    x = torch.randn(4, 16, generator=torch.Generator().manual_seed(0))
    pa, pb = record(build(), x, run="a"), record(build(), x, run="b")
    m = match_runs(pa, pb)
    assert m.pairs and not m.unmatched_ops_a
    assert all(names(pa, rp.a.ops, True) == names(pb, rp.b.ops, True) for rp in m.pairs)


def test_matching_is_deterministic():
    random.seed(0)
    g = torch.Generator().manual_seed(0)
    x, w1, w2 = (
        torch.randn(4, 16, generator=g),
        torch.randn(16, 32, generator=g),
        torch.randn(32, 16, generator=g),
    )
    pa, pb = record(mlp, x, w1, w2, run="a"), record(mlp, x, w1, w2, run="b")
    first = [(rp.a.ops, rp.b.ops) for rp in match_runs(pa, pb).pairs]
    assert first == [(rp.a.ops, rp.b.ops) for rp in match_runs(pa, pb).pairs]
