"""Diagnosis's one door: what the front ends (the CLI, `render/`, the TUI) use of the
diff pipeline and its results, and nothing else of `diagnose/`.

`pipeline.py` composes a diff; the other names here are the read-only views of its
results that the front ends show (a run's breakdown, a job's rank report, a finding's
description). A front end that needs something not listed adds it here, so what the
front ends depend on stays one list (tests/test_layering.py holds them to it).

Each name is imported when first used: the CLI registers every command at start, and an
eager import of the pipeline (libcst, scipy, networkx) cost `magneton record` 5 s
before it recorded anything. The `TYPE_CHECKING` block gives type checkers (and the
layering test) the same imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .advice import propose, ranked, try_change
    from .breakdown import flatten_tree, module_tree, operator_table, top_rows
    from .cause.grouping import CauseGroup, cause_key, kernel_family
    from .cause.rootcause import describe_finding, side_facts, store_diagnosis
    from .fix.apply import git_apply_command, git_toplevel
    from .fix.verify import verify_fix
    from .jobs.ranks import RankReport, job_runs, rank_ranges, rank_report
    from .matching.detect import check_threshold
    from .matching.interpreter import interp_energy, operators_only
    from .pipeline import (
        Progress,
        cause_groups,
        diagnose_findings,
        is_job,
        run_diff,
        store_outcome,
    )
    from .source.text import patch_encoding, read_source, unreadable_note

__all__ = [
    "CauseGroup",
    "Progress",
    "RankReport",
    "cause_groups",
    "cause_key",
    "check_threshold",
    "describe_finding",
    "diagnose_findings",
    "flatten_tree",
    "git_apply_command",
    "git_toplevel",
    "interp_energy",
    "is_job",
    "job_runs",
    "kernel_family",
    "module_tree",
    "operator_table",
    "operators_only",
    "patch_encoding",
    "propose",
    "rank_ranges",
    "rank_report",
    "ranked",
    "read_source",
    "run_diff",
    "side_facts",
    "store_diagnosis",
    "store_outcome",
    "top_rows",
    "try_change",
    "unreadable_note",
    "verify_fix",
]

_LAZY = {
    **dict.fromkeys(("propose", "ranked", "try_change"), ".advice"),
    **dict.fromkeys(("flatten_tree", "module_tree", "operator_table", "top_rows"), ".breakdown"),
    **dict.fromkeys(("CauseGroup", "cause_key", "kernel_family"), ".cause.grouping"),
    **dict.fromkeys(("describe_finding", "side_facts", "store_diagnosis"), ".cause.rootcause"),
    **dict.fromkeys(("git_apply_command", "git_toplevel"), ".fix.apply"),
    "verify_fix": ".fix.verify",
    **dict.fromkeys(("RankReport", "job_runs", "rank_ranges", "rank_report"), ".jobs.ranks"),
    "check_threshold": ".matching.detect",
    **dict.fromkeys(("interp_energy", "operators_only"), ".matching.interpreter"),
    **dict.fromkeys(("patch_encoding", "read_source", "unreadable_note"), ".source.text"),
    **dict.fromkeys(
        ("Progress", "cause_groups", "diagnose_findings", "is_job", "run_diff", "store_outcome"),
        ".pipeline",
    ),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(module, "magneton.diagnose"), name)
