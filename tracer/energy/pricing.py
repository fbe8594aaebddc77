"""Pricing as the recording priced: what diagnosis may re-use of the tracer's energy model.

A re-measurement must cost what the recording would have charged for the same windows,
or confirmation (diagnose/matching/confirm.py) would compare two different prices and
call the difference waste. `reprice` prices re-measured operator windows with the model
the run was estimated with; `recorded_model` reads that model back from the stored run
(`RunEnergy.model`), so a job diff (diagnose/jobs/jobdiff.py) prices what it estimates
with the same coefficients. Together with tracer/timing/timeline.py (`tile`), tracer/timing/warm.py,
tracer/programs/program.py and tracer/capture/unfoldings.py this is the tracer's contract with diagnosis:
torch-free, and the only tracer modules diagnose imports (tests/test_layering.py).
"""

from __future__ import annotations

import copy

import numpy as np

from magneton.model import Profile
from magneton.tracer.energy.power.model import ModelCoefficients
from magneton.tracer.energy.session import Attribution, model_attribution


def recorded_model(profile: Profile) -> ModelCoefficients | None:
    """The energy model the run was estimated with (`RunEnergy.model`), or None."""
    coeffs = profile.energy.model
    if not coeffs:
        return None
    return ModelCoefficients(
        name=str(coeffs.get("name", "")),
        p_static_w=float(coeffs["p_static_w"]),
        e_flop_pj={k: float(v) for k, v in coeffs["e_flop_pj"].items()},
        e_byte_pj=float(coeffs["e_byte_pj"]),
    )


def reprice(
    profile: Profile, walls_ns: np.ndarray, cpu_ns: np.ndarray | None
) -> Attribution | None:
    """Price re-measured iterations of a recorded run the way its recording was priced:
    `walls_ns` and `cpu_ns` are (iterations, ops, 2) windows of the run's operators.
    None when a sensor measured the run (a re-measurement would need that sensor) or
    the run does not say which model priced it."""
    m = recorded_model(profile)
    if profile.run.energy_method != "estimated" or m is None:
        return None
    # a shallow copy per op with its windows set, the windows converted in one numpy
    # call: `dataclasses.replace` and an int() per bound took 0.36 s of each of a
    # 15k-operator diff's six repricings, this 0.16 s
    ops = []
    for op, windows in zip(profile.ops, walls_ns.transpose(1, 0, 2).tolist(), strict=True):
        priced = copy.copy(op)
        priced.windows_ns = list(map(tuple, windows))
        ops.append(priced)
    return model_attribution(ops, m, cpu_ns)
