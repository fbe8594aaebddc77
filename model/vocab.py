"""Shared vocabularies: which operators do no work, which move data, which are collectives.

Every stage classifies aten operators: the tracer to count FLOPs and to find the op that
launched a kernel, matching to merge regions that did nothing, divergence analysis to
skip noise, distributed recording to hook collectives. These sets used to be written out
five times, each a slightly different copy; a new view op added to one and not the others
made matching and divergence analysis disagree about the same operator. They are now
defined here once, each derived from the others where they overlap, so the differences
between them are visible and deliberate.

The module is torch-free (like the whole model package): diagnosis must classify operators of a saved
run on a machine that cannot run the workload.
"""

from __future__ import annotations

import hashlib

# --------------------------------------------------------------------------------------
# Operator sets
# --------------------------------------------------------------------------------------

NO_WORK_OPS = frozenset(
    {
        "aten::empty",
        "aten::empty_like",
        "aten::empty_strided",
        "aten::as_strided",
        "aten::resize_",
        "aten::detach",
        "aten::detach_",
        "aten::lift_fresh",
        "aten::alias",
        "aten::view",
        "aten::view_as",
        "aten::_unsafe_view",
        "aten::_reshape_alias",
        "aten::reshape",  # reaches dispatch only when it is a view; copies show up as clone
        "aten::t",
        "aten::transpose",
        "aten::expand",
        "aten::permute",
        "aten::unsqueeze",
        "aten::squeeze",
        "aten::slice",
        "aten::select",
        "aten::split",
        "aten::split_with_sizes",
        "aten::chunk",
        "aten::unbind",
        "aten::narrow",
        "aten::result_type",
        "aten::is_nonzero",
        "aten::set_",
        "aten::_local_scalar_dense",
        "aten::item",
    }
)
"""Ops that allocate, alias or read metadata: no arithmetic, no data movement. The core
every other "does nothing" set below starts from."""

IN_PLACE_WRITE_OPS = frozenset({"aten::copy_", "aten::fill_", "aten::zero_"})
"""Ops that write a tensor in place. Inside a bigger op (addmm copying its bias into the
output) they are real work but do not make their parent a mere dispatcher, so kernel
extraction in the tracer does not look through them."""

DATA_MOVING_OPS = (
    frozenset({"aten::clone", "aten::contiguous", "aten::_to_copy", "aten::to"})
    | IN_PLACE_WRITE_OPS
)
"""Ops that move or write data. `BOOKKEEPING_OPS` lists most of them (matching treats
layout changes as transparent), but a copy is a real kernel that reads and writes the
whole tensor — the layout round trips and redundant copies of paper cases c2, c5 and c12
are made of exactly these — so divergence analysis never drops them."""

BOOKKEEPING_OPS = (
    NO_WORK_OPS
    | (DATA_MOVING_OPS - {"aten::copy_"})
    | frozenset(
        {
            # wrappers whose real work (if any) shows up as a child op
            "aten::flatten",
            "aten::unflatten",
            "aten::lift_fresh_copy",
            "aten::numpy_T",
            "aten::resolve_conj",
            "aten::resolve_neg",
            "aten::as_strided_",
            "aten::_nnpack_available",
        }
    )
)
"""Operators that only allocate, alias or bookkeep, or are pure wrappers whose real work
(if any) shows up as a child op (`clone` → `copy_`). Kernel extraction in the tracer
skips them, and the sets below are carved out of it (paper §4.3: differences that do not
reach a different kernel are noise). `copy_` is the child that does the work, so it is
not here."""

IGNORED_OPS = BOOKKEEPING_OPS - DATA_MOVING_OPS
"""What divergence analysis ignores: allocations, views and metadata-only ops."""

COPYING_OPS = DATA_MOVING_OPS | frozenset({"aten::lift_fresh_copy", "aten::resize_"})
"""Ops that move real bytes or (re)allocate storage. Matching keeps them as regions of
their own even though they are bookkeeping: a redundant copy is one of the wastes
matching must be able to show."""

FREE_OPS = BOOKKEEPING_OPS - COPYING_OPS
"""Ops that only alias or describe memory. Matching merges a region pair made only of
these into a neighbour."""

ZERO_COST_OPS = NO_WORK_OPS | frozenset(
    {
        # more allocations and views than BOOKKEEPING_OPS lists
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::expand_as",
        "aten::diagonal",
        "aten::unfold",
        # shape queries
        "aten::sym_size",
        "aten::sym_stride",
        "aten::sym_numel",
        "aten::sym_storage_offset",
        "aten::size",
        "aten::stride",
        "aten::dim",
    }
)
"""Ops the FLOP counter charges nothing (no FLOPs, no bytes). The wrappers of
`BOOKKEEPING_OPS` (`flatten`, `resolve_conj`, …) are not here: when they do copy, the
counter charges the bytes they move."""

# --------------------------------------------------------------------------------------
# Collectives
# --------------------------------------------------------------------------------------

COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional", "c10d_functional")
"""Operator namespaces of collectives."""


def is_collective(name: str) -> bool:
    """True for an operator name that is a collective (`c10d::allreduce_`).

    `_c10d_functional::wait_tensor` is the wait of a functional collective, an operator of
    its own, not a collective: counting it would pair a wait on one rank with the
    collective on another."""
    ns = name.split("::", 1)[0]
    return ns in COLLECTIVE_NAMESPACES and not name.endswith("::wait_tensor")


# --------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------


def sha256_file(path: str) -> str:
    """Hex SHA-256 of a file, read in 1 MiB chunks (scripts and checkpoints alike)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()
