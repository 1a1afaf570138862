"""Workloads: what data, how it is read, how training consumes it, which variants.

A workload is a TOML file (``workloads/*.toml`` ship with the package) with a
``[dataset]``, a ``[reader]`` and a ``[train]`` section and a ``variants`` list.
Dataset and reader options depend on the workload's ``kind`` (the runner that
builds its variants); ``[train]`` is common to all and becomes a
:class:`TrainConfig`.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

from headrace.errors import ConfigError

__all__ = ["TrainConfig", "Workload", "builtin_workloads", "load_workload"]


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainConfig:
    """How training consumes the data: batches, steps, simulated compute, this host."""

    batch_size: int
    #: steps per timed trial (each variant runs ``warmup_steps + trials * steps``)
    steps: int = 1000
    trials: int = 5
    warmup_steps: int = 100
    #: simulated accelerator time per step, seconds (0: the loader alone)
    computation_time: float = 0.0
    #: standard deviation of the simulated compute time (normal, clipped at 0)
    computation_time_stdev: float = 0.0
    #: accelerator utilisation a run must reach to pass (DLIO/MLPerf Storage: 0.90)
    au_threshold: float = 0.90
    seed: int = 0
    rank: int = 0
    world_size: int = 1

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.steps < 1 or self.trials < 1 or self.warmup_steps < 0:
            raise ConfigError(
                "train: batch_size, steps and trials must be >= 1 and warmup_steps >= 0 "
                f"(got {self.batch_size=}, {self.steps=}, {self.trials=}, {self.warmup_steps=})"
            )
        if self.computation_time < 0 or self.computation_time_stdev < 0:
            raise ConfigError(
                f"train: computation_time and its stdev must be >= 0 "
                f"(got {self.computation_time}, {self.computation_time_stdev})"
            )
        if not 0 < self.au_threshold <= 1:
            raise ConfigError(f"train: au_threshold must be in (0, 1] (got {self.au_threshold})")
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(
                f"train: rank must be in [0, world_size) (got {self.rank=}, {self.world_size=})"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """One benchmark workload: a kind, its dataset and reader options, training, variants."""

    name: str
    kind: str
    train: TrainConfig
    variants: tuple[str, ...]
    description: str = ""
    dataset: Mapping[str, Any] = field(default_factory=dict)
    reader: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.variants:
            raise ConfigError(f"workload {self.name!r}: the variants list is empty")

    def replace(self, **changes: Any) -> Workload:
        """A copy with top-level fields, or ``dataset``/``reader``/``train`` keys, changed."""
        for section in ("dataset", "reader"):
            if section in changes and isinstance(changes[section], Mapping):
                changes[section] = {**getattr(self, section), **changes[section]}
        if "train" in changes and isinstance(changes["train"], Mapping):
            changes["train"] = dataclasses.replace(self.train, **changes["train"])
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "description": self.description,
            "dataset": dict(self.dataset),
            "reader": dict(self.reader),
            "train": dataclasses.asdict(self.train),
            "variants": list(self.variants),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "<workload>") -> Workload:
        known = {"name", "kind", "description", "dataset", "reader", "train", "variants"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"{where}: unknown keys {unknown}; expected some of {sorted(known)}")
        for key in ("kind", "train", "variants"):
            if key not in data:
                raise ConfigError(f"{where}: missing {key!r}")
        train = data["train"]
        fields = {f.name for f in dataclasses.fields(TrainConfig)}
        bad = sorted(set(train) - fields)
        if bad:
            raise ConfigError(
                f"{where}: unknown [train] keys {bad}; expected some of {sorted(fields)}"
            )
        try:
            return cls(
                name=str(data.get("name", os.path.splitext(os.path.basename(where))[0])),
                kind=str(data["kind"]),
                description=str(data.get("description", "")),
                dataset=dict(data.get("dataset", {})),
                reader=dict(data.get("reader", {})),
                train=TrainConfig(**train),
                variants=tuple(data["variants"]),
            )
        except TypeError as exc:
            raise ConfigError(f"{where}: {exc}") from exc


def builtin_workloads() -> dict[str, Workload]:
    """The workloads shipped in ``headrace/bench/workloads``, by name, in file order."""
    out: dict[str, Workload] = {}
    folder = resources.files("headrace.bench") / "workloads"
    for entry in sorted(folder.iterdir(), key=lambda p: p.name):
        if entry.name.endswith(".toml"):
            wl = Workload.from_dict(tomllib.loads(entry.read_text()), where=entry.name)
            out[wl.name] = wl
    return out


def load_workload(name_or_path: str) -> Workload:
    """A built-in workload by name, or a workload TOML file by path."""
    if os.path.exists(name_or_path):
        try:
            with open(name_or_path, "rb") as f:
                data = tomllib.load(f)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{name_or_path}: not valid TOML: {exc}") from exc
        return Workload.from_dict(data, where=name_or_path)
    known = builtin_workloads()
    if name_or_path not in known:
        raise ConfigError(
            f"unknown workload {name_or_path!r}: not a file, and the built-in ones are "
            f"{sorted(known)}"
        )
    return known[name_or_path]
