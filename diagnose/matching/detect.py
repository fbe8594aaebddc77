"""Detection (paper §6.1): flag matched region pairs whose energies differ, and decide
whether the difference is waste or a performance trade-off.

Rules, and the failure each prevents:

- **Fold repeats first.** Pairs with the same operator sequence on both sides (one per
  layer, typically) are folded into one finding whose regions are the union and whose
  energies and times are sums. A per-layer difference that is tiny on its own but
  repeats in all 32 layers is exactly the kind of waste the paper finds (a concat in
  every layer worth 6% of the run), and one finding per layer would bury it under
  near-identical rows. The threshold and the tiny-region floor apply to the folded sums.
  Adjacent *different* regions are never merged: each finding must point at one
  implementation choice, and merging two would mix their causes.
- **Flag** when |E_a − E_b| ≥ threshold × max(E_a, E_b) (default 10%, allowed down to
  5%: the paper's floor without false positives from power noise).
- **Ignore tiny regions**: both sides below `TINY_SHARE` (0.1%) of their run's energy.
  Below that, per-operator attribution error and timer jitter dominate the difference.
- **Only confident differences.** A run's per-iteration operator energies
  (`Profile.energy.op_samples_j`) give each region one energy per timed iteration. The
  energy ratio of the two sides is tested with Welch's t on the logarithms of those
  energies (ratios are what the threshold is about, and a log makes their noise
  symmetric); a pair is a finding only when the one-sided lower bound at `CONFIDENCE`
  (95%) of the relative saving reaches the threshold. A difference the noise of the
  run could explain is not reported at all: a confident, wrong finding is the worst thing
  this tool can print. Without samples (a hand-built or pre-spread profile, a replayed
  run whose samples no longer describe its energies) the point rule applies alone.
  The point energies and the verdict rules below stay those of the operators' estimates.
- **Undecided pairs go to re-measurement** when it will run (`keep_undecided`): a pair
  whose point estimate passes but whose interval neither reaches the threshold nor rules
  it out. Two recordings made a minute apart on a loaded 2-core machine measured a real
  1.4x convolution difference as 1.17x (one recording slowed throughout by a busy
  sibling core), and a 1.9x dtype difference and a 1.3x grad-mode one were lost the same
  way in CI; no statistic over the two recordings can tell that apart from noise, but
  rounds that alternate between the sides can. Interleaved confirmation
  (diagnose/matching/confirm.py) then decides them with a stricter test than a confident
  candidate gets; without it (`--no-rerun`, a program run) they are not reported.
- **Identical work calibrates the noise between the two recordings.** Iterations of one
  recording share its machine state; two recordings do not (load, frequency, a busy
  hyper-thread sibling changed between them), and on a loaded 2-core machine identical
  code drifted 10-15% between recordings while each recording's own iterations agreed
  within 3%. Matched pairs that did the same work the same way - the same operators with
  the same input shapes and dtypes, reaching the same kernels - are an A/A experiment
  inside the diff: the energy-weighted root mean square of their log energy ratios
  (`between_runs_log_sd`, around 0, so a uniform drift counts) is added to every region's
  variance. A difference identical work also showed is then not evidence. Limitation: a
  setting that slows every kernel alike without changing any (thread count) is
  indistinguishable from load here; only interleaved re-measurement could tell them apart.
- **Verdict "waste"** when the cheaper side is not slower by more than 1% (plus
  `TIME_ABS_SLACK_S`, the dispatch jitter of a microsecond-scale region) *and* the
  region outputs agree within 1%; otherwise "trade-off" (cheaper but slower, or cheaper
  but numerically different). A confirmed finding's "slower" must show in its
  interleaved rounds (confirm.py `_slower_at_least_s`).
- **Output agreement is a proxy.** Records hold summaries, not data, so the element-wise
  relative difference cannot be computed after the fact. The proxy compares the
  outputs' quantiles and extremes, each relative to max(|q_a|, |q_b|, 1e-3·max|x|). For
  any pairing of elements the sorted differences lower-bound the largest element-wise
  difference, so the proxy can only under-estimate it: "waste" means "no evidence of a
  numerical difference", not a proof of ≤1% element-wise.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np
from scipy import special  # t/normal quantiles; scipy.stats costs 0.6 s more to import

from magneton.model import Finding, MagnetonError, OpRecord, Profile, Region, SavingInterval

from .equivalence import Signature, signature
from .match import MatchResult, RegionPair

DEFAULT_THRESHOLD = 0.10
MIN_THRESHOLD = 0.05
TINY_SHARE = 0.001
TIME_SLACK = 0.01
TIME_ABS_SLACK_S = 2e-6
OUTPUT_TOL = 0.01
_ATOL_FRAC = 1e-3
CONFIDENCE = 0.95


def check_threshold(threshold: float) -> None:
    if not (MIN_THRESHOLD <= threshold < 1.0):
        raise MagnetonError(
            f"--threshold must be between {MIN_THRESHOLD} and 1 (got {threshold}); below 5% "
            "power noise produces false positives"
        )


def run_energy_j(p: Profile) -> float:
    """Energy of one entry call: the run's figure, or the sum over operators."""
    return p.run.energy_j if p.run.energy_j > 0 else sum(op.energy_j for op in p.ops)


def output_rel_diff(sa: Signature, sb: Signature) -> float:
    """Proxy of the max element-wise relative difference of two matched outputs."""
    if not (sa.comparable and sb.comparable) or sa.cls != sb.cls:
        return float("inf")
    if sa.cls in ("i", "b"):
        return 0.0 if sa.multiset == sb.multiset else 1.0
    scale = max(sa.scale, sb.scale)
    if scale == 0.0 or sa.numel == 0:
        return 0.0
    if len(sa.quantiles) != len(sb.quantiles):
        return float("inf")
    qa = np.asarray([*sa.quantiles, *sa.stats[2:4]], dtype=np.float64)
    qb = np.asarray([*sb.quantiles, *sb.stats[2:4]], dtype=np.float64)
    den = np.maximum(np.maximum(np.abs(qa), np.abs(qb)), _ATOL_FRAC * scale)
    return float(np.max(np.abs(qa - qb) / den))


def run_samples(p: Profile) -> np.ndarray | None:
    """The run's per-iteration operator energies, (iterations, ops), each op's rescaled to
    its point estimate: the samples give the noise, the operators' energies the level (an
    estimate priced on the fastest or median iteration is not the samples' mean). None
    when the run has no samples that describe its operators' energies."""
    rows = p.energy.op_samples_j
    if len(rows) < 2 or any(len(r) != len(p.ops) for r in rows):
        return None
    if p.run.energy_method == "replayed" or p.energy.replay:
        return None  # replay re-priced the ops; the timing-pass samples no longer apply
    s = np.asarray(rows, dtype=float)
    mean = s.mean(axis=0)
    point = np.array([op.energy_j for op in p.ops])
    if mean.sum() <= 0 or not _within_samples(point, s):
        return None  # energies were re-priced after recording (a tool, a test): not these
    scale = np.divide(point, mean, out=np.zeros_like(point), where=mean > 0)
    return s * scale


SAMPLE_TOL = 1e-3  # the stored samples keep 4 significant digits (model/energy.py)


def _within_samples(point: np.ndarray, s: np.ndarray) -> bool:
    """Whether every operator's point estimate is a value its own iterations could give
    (the recorder's estimates are a mean, a minimum or an expected minimum of them). A
    test on the run's total (point / mean within 0.5-2x) threw away every sample of a
    recording whose loaded iterations took over twice its quiet ones, which left CI's
    findings without intervals; a re-pricing after recording still lands outside."""
    low = s.min(axis=0) * (1.0 - SAMPLE_TOL) - 1e-15
    high = s.max(axis=0) * (1.0 + SAMPLE_TOL) + 1e-15
    return bool(np.all((point >= low) & (point <= high)))


def region_samples(samples: np.ndarray | None, ops: list[int]) -> np.ndarray | None:
    """A region's energy in each timed iteration."""
    if samples is None or not ops:
        return None
    return samples[:, ops].sum(axis=1)


def saving_interval(
    wasteful_j: np.ndarray,
    efficient_j: np.ndarray,
    confidence: float = CONFIDENCE,
    between_runs_log_sd: float = 0.0,
) -> tuple[float, float, float] | None:
    """(ratio, low, high) of E_wasteful / E_efficient: the geometric-mean ratio and its
    one-sided bounds at `confidence` (Welch's t on log energies), with the variance of
    the noise between the two recordings (`between_runs_log_sd`, in log units) added.
    None when either side has fewer than two positive samples."""
    w = np.log(wasteful_j[wasteful_j > 0])
    e = np.log(efficient_j[efficient_j > 0])
    if len(w) < 2 or len(e) < 2:
        return None
    d = float(w.mean() - e.mean())
    vw, ve = w.var(ddof=1) / len(w), e.var(ddof=1) / len(e)
    v_between = between_runs_log_sd**2
    se = float(np.sqrt(vw + ve + v_between))
    if se == 0.0:
        return float(np.exp(d)), float(np.exp(d)), float(np.exp(d))
    if vw + ve > 0:
        # Welch-Satterthwaite; the between-runs term is estimated from many regions and
        # counted as known (it only ever widens the interval)
        df = (vw + ve) ** 2 / (vw**2 / (len(w) - 1) + ve**2 / (len(e) - 1))
        q = float(special.stdtrit(df, confidence))
    else:
        q = float(special.ndtri(confidence))
    return float(np.exp(d)), float(np.exp(d - q * se)), float(np.exp(d + q * se))


def same_work(pa: Profile, pb: Profile, rp: RegionPair) -> bool:
    """Whether both sides of a matched pair did the same work the same way: operators,
    input shapes, dtypes, contiguity and scalar arguments, and (where recorded) dispatch
    chains and kernels, in order. On a CPU no kernels are recorded: without the dispatch
    chains a convolution reaching `mkldnn_convolution` on one side and `slow_conv2d` on
    the other counted as "identical work", and its real 1.5x difference was taken for
    drift between the recordings, hiding the finding it is."""
    if len(rp.a.ops) != len(rp.b.ops) or not rp.a.ops:
        return False
    return all(
        _same_op(pa, pb, pa.ops[i], pb.ops[j]) for i, j in zip(rp.a.ops, rp.b.ops, strict=True)
    )


def _same_op(pa: Profile, pb: Profile, oa: OpRecord, ob: OpRecord) -> bool:
    def key(o: OpRecord) -> tuple:
        return (o.name, o.input_shapes, o.input_dtypes, o.input_contiguous, o.scalar_args)

    if key(oa) != key(ob):
        return False
    if oa.call_paths and ob.call_paths and oa.call_paths != ob.call_paths:
        return False
    ka = [pa.kernels[k].name for k in oa.kernels if 0 <= k < len(pa.kernels)]
    kb = [pb.kernels[k].name for k in ob.kernels if 0 <= k < len(pb.kernels)]
    return not (ka and kb and ka != kb)


# Prior for the between-runs noise and how much identical work (as a share of the runs'
# energy) weighs as much as the prior. A few tiny identical regions are weak evidence.
PRIOR_BETWEEN_LOG_SD = 0.05
PRIOR_WEIGHT = 0.25


def witnesses(pa: Profile, pb: Profile, pairs: list[RegionPair]) -> list[RegionPair]:
    """The pairs that are an A/A experiment: same work the same way (`same_work`), on
    inputs that came from sources or from other such pairs on both sides. A region fed by
    work that differed is not one: a relu after a slow convolution measured 1.7-2x its
    counterpart after mkldnn's in every recording (the input's cache and allocation
    state), and taken as "the drift between the recordings" it hid the convolution's
    real 1.45x."""
    same = [same_work(pa, pb, rp) for rp in pairs]
    owner_a = {o: k for k, rp in enumerate(pairs) for o in rp.a.ops}
    owner_b = {o: k for k, rp in enumerate(pairs) for o in rp.b.ops}

    def clean_inputs(p: Profile, ops: list[int], owner: dict[int, int], k: int) -> bool:
        for o in ops:
            for t in p.ops[o].inputs:
                src = p.tensors[t].producer if 0 <= t < len(p.tensors) else -1
                j = owner.get(src)
                if src >= 0 and j != k and (j is None or not same[j]):
                    return False
        return True

    return [
        rp
        for k, rp in enumerate(pairs)
        if same[k]
        and clean_inputs(pa, rp.a.ops, owner_a, k)
        and clean_inputs(pb, rp.b.ops, owner_b, k)
    ]


def between_runs_log_sd(pa: Profile, pb: Profile, pairs: list[RegionPair]) -> float:
    """How much identical work differed between these two recordings, in log units: the
    energy-weighted mean square of ln(E_a / E_b) over the `witnesses`, shrunk towards
    `PRIOR_BETWEEN_LOG_SD` in proportion to the energy share it rests on."""
    num = den = 0.0
    for rp in witnesses(pa, pb, pairs):
        ea = sum(pa.ops[o].energy_j for o in rp.a.ops)
        eb = sum(pb.ops[o].energy_j for o in rp.b.ops)
        if ea <= 0 or eb <= 0:
            continue
        w = 0.5 * (ea / max(run_energy_j(pa), 1e-300) + eb / max(run_energy_j(pb), 1e-300))
        num += w * np.log(ea / eb) ** 2
        den += w
    num += PRIOR_WEIGHT * PRIOR_BETWEEN_LOG_SD**2
    return float(np.sqrt(num / (den + PRIOR_WEIGHT)))


def point_candidate(
    ea: float, eb: float, e_run_a: float, e_run_b: float, threshold: float
) -> str | None:
    """The point rule (module docstring): the side that spends more when the two
    energies differ by the threshold and either reaches the tiny-share floor of its run;
    None otherwise."""
    big = max(ea, eb)
    if big <= 0.0 or abs(ea - eb) < threshold * big:
        return None
    if ea < TINY_SHARE * e_run_a and eb < TINY_SHARE * e_run_b:
        return None
    return "a" if ea > eb else "b"


def confident(ratio_low: float, threshold: float) -> bool:
    """Whether the saving's lower bound, as a share of the wasteful side, reaches it."""
    return ratio_low > 1.0 and 1.0 - 1.0 / ratio_low >= threshold


def cannot_reach(ratio_high: float, threshold: float) -> bool:
    """Whether even the upper bound of the ratio is below the threshold's ratio (the
    difference is ruled out, not just unproven)."""
    return ratio_high < 1.0 / (1.0 - threshold)


def undecided(f: Finding, threshold: float) -> bool:
    """Whether `f` is a candidate detection left for re-measurement to decide (module
    docstring): its interval neither reaches the threshold nor rules it out."""
    iv = f.interval
    return iv is not None and not iv.confirmed and not confident(iv.ratio_low, threshold)


def _interval(
    sa: np.ndarray | None,
    sb: np.ndarray | None,
    wasteful: str,
    e_w: float,
    e_eff: float,
    between_sd: float,
) -> SavingInterval | None:
    if sa is None or sb is None:
        return None
    w, eff = (sa, sb) if wasteful == "a" else (sb, sa)
    got = saving_interval(w, eff, between_runs_log_sd=between_sd)
    if got is None:
        return None
    ratio, low, high = got
    return SavingInterval(
        ratio=ratio,
        ratio_low=low,
        ratio_high=high,
        saving_j_low=e_w * (1.0 - 1.0 / low) if low > 0 else 0.0,
        saving_j_high=e_w * (1.0 - 1.0 / high) if high > 0 else 0.0,
        confidence=CONFIDENCE,
        iterations_a=len(sa),
        iterations_b=len(sb),
        between_runs_log_sd=between_sd,
    )


def _union(p: Profile, regions: list[Region]) -> Region:
    """One region from several; energy and time are summed from the profile's operators
    (the authority, e.g. after a replay refined them), not copied from the regions."""
    ops = sorted({o for r in regions for o in r.ops})
    return Region(
        ops=ops,
        inputs=list(dict.fromkeys(t for r in regions for t in r.inputs)),
        outputs=list(dict.fromkeys(t for r in regions for t in r.outputs)),
        energy_j=sum(p.ops[o].energy_j for o in ops),
        time_s=sum(p.ops[o].time_s for o in ops),
    )


def _modules(p: Profile, ops: list[int]) -> list[str]:
    return list(dict.fromkeys(p.ops[o].module for o in ops if p.ops[o].module))


def detect(
    pa: Profile,
    pb: Profile,
    match: MatchResult,
    threshold: float = DEFAULT_THRESHOLD,
    keep_undecided: bool = False,
) -> list[Finding]:
    """Findings for the flagged region pairs, ranked by energy saved (ids from 1); with
    `keep_undecided`, also the pairs left for re-measurement (`undecided`)."""
    out_diff = _output_diff(pa, pb, match)
    folded = _fold_by_op_names(pa, pb, match.pairs)
    e_run_a, e_run_b = run_energy_j(pa), run_energy_j(pb)
    samp_a, samp_b = run_samples(pa), run_samples(pb)
    between_sd = between_runs_log_sd(pa, pb, match.pairs)
    findings: list[Finding] = []
    for group in folded:
        ra = _union(pa, [rp.a for rp in group])
        rb = _union(pb, [rp.b for rp in group])
        ea, eb = ra.energy_j, rb.energy_j
        wasteful = point_candidate(ea, eb, e_run_a, e_run_b, threshold)
        if wasteful is None:
            continue
        e_w, e_eff = (ea, eb) if wasteful == "a" else (eb, ea)
        interval = _interval(
            region_samples(samp_a, ra.ops),
            region_samples(samp_b, rb.ops),
            wasteful,
            e_w,
            e_eff,
            between_sd,
        )
        if interval is not None and not confident(interval.ratio_low, threshold):
            if not keep_undecided or cannot_reach(interval.ratio_high, threshold):
                continue  # within what the runs' own noise explains
        t_w, t_eff = (ra.time_s, rb.time_s) if wasteful == "a" else (rb.time_s, ra.time_s)
        diff = max(out_diff(rp) for rp in group)
        verdict = verdict_of(t_w, t_eff, len(group), diff)
        saving = e_w - e_eff
        e_run_w = e_run_a if wasteful == "a" else e_run_b
        f = Finding(
            id=0,
            wasteful=wasteful,
            verdict=verdict,
            region_a=ra,
            region_b=rb,
            saving_j=saving,
            saving_share=saving / e_run_w if e_run_w > 0 else 0.0,
            output_rel_diff=diff if np.isfinite(diff) else 1.0,
            ops_a=[pa.ops[o].name for o in ra.ops],
            ops_b=[pb.ops[o].name for o in rb.ops],
            modules_a=_modules(pa, ra.ops),
            modules_b=_modules(pb, rb.ops),
            occurrences=len(group),
            interval=interval,
        )
        findings.append(f)
    return ranked(findings)


def _output_diff(pa: Profile, pb: Profile, match: MatchResult) -> Callable[[RegionPair], float]:
    """The worst relative difference between a region pair's matched outputs (signatures
    computed once per tensor, shared by every pair)."""
    fa = dict(match.anchors)
    fb = {b: a for a, b in match.anchors}
    for side, t, partner in match.identity:
        (fa if side == "a" else fb)[t] = partner
    sig_a: dict[int, Signature] = {}
    sig_b: dict[int, Signature] = {}

    def sa_(t: int) -> Signature:
        if t not in sig_a:
            sig_a[t] = signature(pa.tensors[t])
        return sig_a[t]

    def sb_(t: int) -> Signature:
        if t not in sig_b:
            sig_b[t] = signature(pb.tensors[t])
        return sig_b[t]

    def out_diff(rp: RegionPair) -> float:
        worst = 0.0
        pairs = [(t, fa[t]) for t in rp.a.outputs if t in fa]
        pairs += [(fb[t], t) for t in rp.b.outputs if t in fb]
        for a, b in dict.fromkeys(pairs):
            worst = max(worst, output_rel_diff(sa_(a), sb_(b)))
        return worst

    return out_diff


def _fold_by_op_names(pa: Profile, pb: Profile, pairs: list[RegionPair]) -> list[list[RegionPair]]:
    """Region pairs with the same operator names on both sides, as one group each (in
    first-seen order): one finding for a pattern repeated in every layer."""
    folded: dict[tuple, list[RegionPair]] = defaultdict(list)
    for rp in pairs:
        key = (
            tuple(pa.ops[o].name for o in rp.a.ops),
            tuple(pb.ops[o].name for o in rp.b.ops),
        )
        folded[key].append(rp)
    return list(folded.values())


def verdict_of(t_wasteful_s: float, t_efficient_s: float, places: int, out_diff: float) -> str:
    """The paper's rule: "waste" when the cheaper side is not slower by more than 1% (plus
    the dispatch jitter of each of its `places`) and the outputs agree within 1%."""
    slack = t_wasteful_s * (1.0 + TIME_SLACK) + TIME_ABS_SLACK_S * places
    return "waste" if t_efficient_s <= slack and out_diff <= OUTPUT_TOL else "trade-off"


def ranked(findings: list[Finding]) -> list[Finding]:
    """Findings by energy saved, largest first, numbered from 1."""
    findings.sort(key=lambda f: (-f.saving_j, f.region_a.ops[:1], f.region_b.ops[:1]))
    for i, f in enumerate(findings, start=1):
        f.id = i
    return findings
