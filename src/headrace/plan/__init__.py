"""What to read: pure, counter-based plans. No I/O, no threads, no clocks."""

from headrace.plan._mixture import MixturePlan, quantize_weights
from headrace.plan._permute import (
    Permutation,
    VisitOrders,
    cached_permutation,
    derive_keys,
    retry_rows,
)
from headrace.plan._slicing import host_slice, step_samples
from headrace.plan._state import (
    PLAN_VERSION,
    STEP_LIMIT,
    LoaderState,
    array_state,
    fingerprint_digest,
    fingerprint_parts,
    legacy_digest,
    legacy_digests,
)
from headrace.plan._windows import WindowLayout, WindowPlan, group_by_window

__all__ = [
    "LoaderState",
    "MixturePlan",
    "PLAN_VERSION",
    "Permutation",
    "STEP_LIMIT",
    "VisitOrders",
    "WindowLayout",
    "WindowPlan",
    "array_state",
    "cached_permutation",
    "derive_keys",
    "fingerprint_digest",
    "fingerprint_parts",
    "group_by_window",
    "host_slice",
    "legacy_digest",
    "legacy_digests",
    "quantize_weights",
    "retry_rows",
    "step_samples",
]
