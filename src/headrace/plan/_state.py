"""The loader's checkpoint: tiny, versioned, and refused on the wrong data."""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

from headrace.errors import StateError

__all__ = ["PLAN_VERSION", "LoaderState", "fingerprint_digest"]

PLAN_VERSION = 1


def fingerprint_digest(fingerprint: dict[str, Any]) -> str:
    """A short stable digest of a source's fingerprint (paths, sizes, dtypes, config)."""
    blob = json.dumps(fingerprint, sort_keys=True, separators=(",", ":")).encode()
    return hashlib.sha256(blob).hexdigest()[:32]


@dataclass(frozen=True, kw_only=True, slots=True)
class LoaderState:
    """Everything needed to resume: O(1) in the run's length."""

    seed: int
    step: int
    batch_size: int
    fingerprint: str
    version: int = PLAN_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> LoaderState:
        try:
            version = int(d["version"])
            if version != PLAN_VERSION:
                raise StateError(
                    f"loader state has plan version {version}; this headrace plans with "
                    f"version {PLAN_VERSION} and cannot replay it"
                )
            st = cls(
                seed=int(d["seed"]),
                step=int(d["step"]),
                batch_size=int(d["batch_size"]),
                fingerprint=str(d["fingerprint"]),
                version=version,
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"not a headrace loader state: {d!r} ({exc})") from exc
        if not 0 <= st.seed < 2**63 or st.step < 0 or st.batch_size < 1:
            raise StateError(
                f"loader state out of range: seed {st.seed} (expected [0, 2**63)), step "
                f"{st.step} (expected >= 0), batch size {st.batch_size} (expected >= 1)"
            )
        return st

    def check(self, *, fingerprint: str, batch_size: int) -> None:
        """Refuse a state saved on other data or with another global batch size."""
        if fingerprint != self.fingerprint:
            raise StateError(
                f"loader state was saved on different data (fingerprint {self.fingerprint}, "
                f"this loader's sources have {fingerprint}): same files, sizes, dtypes and "
                f"sampling config are required to resume"
            )
        if batch_size != self.batch_size:
            raise StateError(
                f"loader state was saved with global batch size {self.batch_size}, this "
                f"loader has {batch_size}; the global batch must not change on resume "
                f"(the host count may)"
            )
