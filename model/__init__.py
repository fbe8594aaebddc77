"""The ground floor: the typed results every stage exchanges, and the errors they raise.

Every stage imports from here and nothing here imports a stage (nor torch, nor the graph
engine), so a saved run can be diffed, reported and browsed on a machine that cannot run
the workload. One module per concept:

    errors      MagnetonError and its family (one line and an exit code for the user)
    run         a recorded run: Profile, RunInfo, OpRecord, TensorRecord, ...
    energy      how a figure was obtained and how sure it is: RunEnergy, SavingInterval
    job         a distributed job: DistInfo, CollectiveTimes, JobInfo
    diagnosis   what diagnosis attaches: Divergence, RootCause, Fix, ...
    diff        a diff's result: Region, Finding, DiffResult
    vocab       the operator vocabularies and framework names the stages must agree on

`from magneton.model import Profile` reads the same as the module it lives in.
"""

from __future__ import annotations

from .advice import Change, Tried
from .diagnosis import (
    Divergence,
    Fix,
    FlowHop,
    KeyVariableInfo,
    OperandProperty,
    OriginInfo,
    PathElement,
    RootCause,
    RuleRef,
    Verification,
)
from .diff import (
    DiffResult,
    Finding,
    Region,
    RunSummary,
)
from .energy import (
    ENERGY_METHODS,
    UNSTABLE_CV,
    EnergySpread,
    OutsideWork,
    RunEnergy,
    SavingInterval,
)
from .errors import (
    MagnetonError,
    WorkerError,
    WorkloadError,
)
from .job import (
    DIST_CONFIG_PREFIX,
    CollectiveInfo,
    CollectiveTimes,
    DistInfo,
    JobInfo,
)
from .run import (
    FrameRecord,
    KernelRecord,
    ModuleRecord,
    OpRecord,
    PowerSeries,
    Profile,
    RunInfo,
    TensorRecord,
    gc_paused,
    script_unchanged,
    split_stored_config,
    stored_config,
)

__all__ = [
    "Change",
    "Tried",
    "CollectiveInfo",
    "CollectiveTimes",
    "DIST_CONFIG_PREFIX",
    "DiffResult",
    "DistInfo",
    "Divergence",
    "ENERGY_METHODS",
    "EnergySpread",
    "Finding",
    "Fix",
    "FlowHop",
    "FrameRecord",
    "JobInfo",
    "KernelRecord",
    "KeyVariableInfo",
    "MagnetonError",
    "ModuleRecord",
    "OpRecord",
    "OutsideWork",
    "OperandProperty",
    "OriginInfo",
    "PathElement",
    "PowerSeries",
    "Profile",
    "Region",
    "RootCause",
    "RuleRef",
    "RunEnergy",
    "RunInfo",
    "RunSummary",
    "SavingInterval",
    "TensorRecord",
    "UNSTABLE_CV",
    "Verification",
    "WorkerError",
    "WorkloadError",
    "gc_paused",
    "script_unchanged",
    "split_stored_config",
    "stored_config",
]
