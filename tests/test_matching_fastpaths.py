"""The cheaper paths of differential matching give exactly what the plain ones give.

`match_tensors` compares the spectra of prefiltered pairs in numpy batches per pair of
layouts instead of one `distance` call per pair; `build_graph` computes dominators in one
pass over execution order instead of networkx's iterative algorithm. Both must be exact
(the tie-breaker of the path alignment uses the distance values, so a last-bit change
could move a cut). Runs are recorded with the real recorder from HF models built from a
config (random weights, seeded, nothing downloads).
"""

from __future__ import annotations

import itertools
import random

import networkx as nx
import pytest
import torch

from magneton.diagnose.matching import equivalence
from magneton.diagnose.matching.equivalence import TensorIndex, match_tensors
from magneton.diagnose.matching.match import (
    SRC,
    _immediate_dominators,
    align,
    build_graph,
    match_runs,
)
from magneton.model import Profile
from magneton.tracer.programs.record import RecordOptions, record_callable

OPTS = RecordOptions(warmup=0, repeat=1, power="model", call_paths=False)


def _forward(model, ids):
    with torch.no_grad():
        return model(ids).last_hidden_state


def _gpt2(attn: str):
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=64)
    return GPT2Model._from_config(cfg, attn_implementation=attn).eval()


def _llama(attn: str):
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    cfg = LlamaConfig(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=1000,
        max_position_embeddings=64,
    )
    return LlamaModel._from_config(cfg, attn_implementation=attn).eval()


def _record(build, attn: str, seed: int = 1) -> Profile:
    ids = torch.randint(0, 1000, (1, 16), generator=torch.Generator().manual_seed(seed))
    return record_callable(_forward, (build(attn), ids), run=attn, options=OPTS)


@pytest.fixture(scope="module")
def runs() -> dict[str, tuple[Profile, Profile]]:
    return {
        "gpt2": (_record(_gpt2, "eager"), _record(_gpt2, "sdpa")),
        "llama": (_record(_llama, "eager"), _record(_llama, "sdpa")),
    }


def _indexes(pa: Profile, pb: Profile) -> tuple[TensorIndex, TensorIndex]:
    ga, gb = build_graph(pa), build_graph(pb)
    return (
        TensorIndex(t for t in pa.tensors if ga.data_tensors[t.idx]),
        TensorIndex(t for t in pb.tensors if gb.data_tensors[t.idx]),
    )


@pytest.mark.parametrize("model", ["gpt2", "llama"])
def test_batched_spectra_give_the_per_pair_distances(runs, model, monkeypatch):
    pa, pb = runs[model]
    layouts: list[tuple[bool, bool]] = []  # (same layout, singleton) of each batch
    batch = equivalence._batch_distances

    def spy(la, lb, singleton, pairs, pre):
        layouts.append((la == lb, singleton))
        return batch(la, lb, singleton, pairs, pre)

    monkeypatch.setattr(equivalence, "_batch_distances", spy)
    fast = match_tensors(*_indexes(pa, pb))
    # every kind of batch ran: equal singleton layouts, equal layouts with repeated
    # keys (square unfoldings of attention scores), different layouts of one numel
    assert set(layouts) == {(True, True), (True, False), (False, False)}

    monkeypatch.setattr(equivalence, "_batched_distances", lambda *_: {})
    plain = match_tensors(*_indexes(pa, pb))
    assert list(fast.items()) == list(plain.items())  # same pairs, distances, order
    assert sum(len(v) for v in fast.values()) > len(pa.ops) // 2


def _random_dag(rng: random.Random, n: int) -> tuple[list[int], dict[int, list[int]]]:
    """Nodes 0..n-1 in topological order, each fed by SRC or by 1-3 earlier nodes."""
    preds: dict[int, list[int]] = {}
    for v in range(n):
        k = rng.randint(0, min(3, v))
        preds[v] = rng.sample(range(v), k) if k else [SRC]
    return list(range(n)), preds


def _networkx(preds: dict[int, list[int]]) -> dict[int, int]:
    g = nx.DiGraph()
    g.add_node(SRC)
    g.add_edges_from((u, v) for v, ps in preds.items() for u in ps)
    return nx.immediate_dominators(g, SRC)


def test_one_pass_dominators_equal_networkx_on_random_dags():
    rng = random.Random(0)
    for n in (1, 2, 5, 20, 200):
        for _ in range(20):
            topo, preds = _random_dag(rng, n)
            assert _immediate_dominators(topo, preds) == _networkx(preds)


def test_dominators_of_a_non_topological_order_fall_back_to_the_general_algorithm():
    rng = random.Random(1)
    topo, preds = _random_dag(rng, 30)
    preds[5] = [*preds[5], 17]  # an edge from a later node (e.g. an in-place record)
    assert _immediate_dominators(topo, preds) == _networkx(preds)


def _full(m) -> list:
    return [
        (rp.kind, rp.a.ops, rp.a.inputs, rp.a.outputs, rp.b.ops, rp.b.inputs, rp.b.outputs)
        for rp in m.pairs
    ] + [m.anchors, m.identity, m.unmatched_ops_a, m.unmatched_ops_b]


def test_matching_a_pair_does_not_depend_on_earlier_matchings(runs):
    """Nothing learned while matching one pair (bonus, distance or layout caches) leaks
    into the next: a pair matched again after others gives the identical result."""
    pa, pb = runs["gpt2"]
    other = _record(_gpt2, "eager", seed=2)  # same model, other input: other values
    first = _full(match_runs(pa, pb))
    match_runs(pa, other)
    match_runs(other, pb)
    match_runs(*runs["llama"])
    assert _full(match_runs(pa, pb)) == first
    assert first[0][0] == "matched" and len(first) > 10


def test_align_finds_the_best_bonus_among_the_longest_pairings():
    """The flat-list Fenwick search against brute force: the most pairs strictly
    increasing on both sides, and among those the largest bonus sum."""
    rng = random.Random(3)
    for _ in range(300):
        n = rng.randint(2, 9)
        cells = rng.sample([(i, j) for i in range(5) for j in range(5)], n)
        cand = [(i, j, round(rng.random(), 3)) for i, j in cells]
        got = [cand[q] for q in align(cand)]
        assert all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(got))
        best = max(
            (len(sub), sum(c[2] for c in sub))
            for r in range(1, n + 1)
            for sub in itertools.combinations(sorted(cand), r)
            if all(a[0] < b[0] and a[1] < b[1] for a, b in itertools.pairwise(sub))
        )
        assert len(got) == best[0]
        assert sum(c[2] for c in got) == pytest.approx(best[1], abs=1e-9)


def test_index_parses_a_shared_summary_on_demand_as_signature_does(runs):
    """Tensors that share a representative's summary are only keyed while indexing;
    asking for one's signature parses it then, the same as `signature` would."""
    pa, _ = runs["llama"]
    index = TensorIndex(pa.tensors)
    shared = [t for rep, ts in index.members.items() for t in ts if t != rep]
    floats = [t for t in shared if equivalence.dtype_class(pa.tensors[t].dtype) == "f"]
    assert len(floats) > len(pa.tensors) // 10
    assert not any(t in index.sigs for t in floats)  # not parsed while indexing
    for t in pa.tensors:
        assert repr(index.sigs[t.idx]) == repr(equivalence.signature(t))
    with pytest.raises(KeyError):
        index.sigs[len(pa.tensors) + 5]
