"""Workloads: what data, how it is read, how training consumes it, which variants.

A workload is a TOML file (``workloads/*.toml`` ship with the package) with a
``[dataset]``, a ``[reader]`` and a ``[train]`` section and a ``variants`` list.
Dataset and reader options depend on the workload's ``kind`` (the runner that
builds its variants); ``[train]`` is common to all and becomes a
:class:`TrainConfig`.

No key is ignored. The top level and ``[train]`` are checked here against
their fixed sets; ``[dataset]`` and ``[reader]`` are :class:`Section` tables that
record every key the kind looks up while it is built (``Kind.make``), and a key
it did not look up is refused then, with the closest known key. The known keys
are therefore where the kind reads them: there is no second list to keep.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib import resources
from typing import Any, overload

from headrace._messages import unknown_keys
from headrace.errors import ConfigError

__all__ = [
    "MAX_NUMBER",
    "WARMUP_EPOCHS",
    "Section",
    "TrainConfig",
    "Workload",
    "builtin_workloads",
    "finite",
    "load_workload",
    "naming",
    "refuse",
    "refuse_bad_variants",
]

#: The top-level keys of a workload file.
TOP_KEYS = ("name", "kind", "description", "source", "dataset", "reader", "train", "variants")


def refuse(section: Mapping[str, Any], key: str, instead: str) -> None:
    """Refuse ``key`` if ``section`` sets it: the kind does not take it; ``instead`` says
    what it offers.

    For settings a user may reasonably expect (``odirect``, ``threads``), where
    "unknown key" would not say enough. The key is not recorded as read.
    """
    if key in section.keys():  # the keys view: not recorded
        where = getattr(section, "where", "workload")
        owner = getattr(section, "owner", "this kind")
        raise ConfigError(f"{where}: {owner} does not take {key!r}: {instead}")


#: The largest magnitude a ``[dataset]`` or ``[reader]`` number may have.
MAX_NUMBER = 2**53


def finite(where: str, key: str, value: float) -> float:
    """``value``, refused unless it is a finite number: a setting that is a count, a size
    or a time (``int()`` of infinity raised OverflowError, NaN passed every ``< 0``)."""
    if not math.isfinite(value):
        raise ConfigError(f"{where}: {key} must be a finite number; got {value!r}")
    return value


@contextmanager
def naming(workload: Workload) -> Iterator[None]:
    """Errors raised inside name the workload's file where it came from one (a kind's
    checks name the workload by its name, which a file given by path may not match)."""
    try:
        yield
    except ConfigError as exc:
        if not workload.source or workload.source in str(exc):
            raise
        raise ConfigError(f"{workload.source}: {exc}") from exc


class Section(dict[str, Any]):
    """A ``[dataset]`` or ``[reader]`` table that records which keys were looked up.

    ``get``, ``[]`` and ``in`` record the key (present or not); copying
    (``dict(s)``, ``{**s}``) and iterating do not. A kind reads all its settings
    while it is built, so after that :meth:`check_read` refuses any key it never
    looked up: a typo, or a setting this kind does not have.
    """

    def __init__(
        self,
        data: Mapping[str, Any],
        *,
        where: str,
        owner: str,
        trail: list[tuple[Section, str, Any]] | None = None,
        flags: Mapping[str, str] | None = None,
    ) -> None:
        super().__init__(data)
        self.where = where  # "jpeg.toml [reader]"
        self.owner = owner  # "the files kind"
        # The command-line flag that set a key ("files": "--files"): messages name it.
        self.flags: Mapping[str, str] = flags or {}
        self.read: set[str] = set()
        # (section, key, value) of each key looked up that the file sets, shared by the
        # sections of one kind: a value the kind cannot use is most likely the last one.
        self.trail = [] if trail is None else trail
        # Keys looked up but not set, with the default the kind used: what a variant
        # option may still set (``?odirect=true`` where the file has no odirect).
        self.defaults: dict[str, Any] = {}

    def named(self, key: str, value: Any) -> str:
        """How a message names setting ``key`` = ``value``: by the flag that gave it
        (``--files 64``), else by the file's key (``jpeg.toml [dataset]: files = 64``)."""
        flag = self.flags.get(key)
        if flag is None:
            return f"{self.where}: {key} = {value!r}"
        return f"{flag} {value:g}" if isinstance(value, float) else f"{flag} {value}"

    def get(self, key: str, default: Any = None) -> Any:
        self.read.add(key)
        if not super().__contains__(key):
            self.defaults.setdefault(key, default)
            return default
        return self._like(key, self._checked(key, super().__getitem__(key)), default)

    @overload
    def count(self, key: str, default: int, *, least: int | None) -> int: ...
    @overload
    def count(self, key: str, default: None, *, least: int | None) -> int | None: ...
    def count(self, key: str, default: int | None, *, least: int | None) -> int | None:
        """Setting ``key``: a whole number ``>= least`` (``default`` where it is not set;
        ``least=None``: any whole number, for a kind that checks the range itself).

        Checked where the file is read, so that ``bench --list``'s checks and a run refuse
        it before any dataset is generated, naming the file and key: a reader's own
        check (``in_flight = -1``) came after generating the dataset and named neither,
        and int() read 1.5 as 1."""
        value = self.get(key, default)
        if value is None:
            return None
        whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
        if isinstance(value, bool) or not whole or (least is not None and value < least):
            at_least = "" if least is None else f" >= {least}"
            raise ConfigError(
                f"{self.where}: {key} must be a whole number{at_least}; got {value!r}"
            )
        return int(value)

    def pair(self, key: str, default: tuple[int, int], *, least: int | None) -> tuple[int, int]:
        """Setting ``key``: two whole numbers ``>= least`` (``image_hw = [640, 480]``;
        ``least=None``: any, for a kind that checks the range itself).

        ``[8]`` raised IndexError, ``[8.5, 8]`` was read as 8 x 8 and ``[0, 8]`` was
        accepted by the files kind."""
        value = self.get(key, default)
        whole = [
            isinstance(v, int) or (isinstance(v, float) and v.is_integer())
            for v in (value if isinstance(value, list | tuple) else ())
        ]
        if (
            len(whole) != 2
            or not all(whole)
            or any(isinstance(v, bool) or (least is not None and v < least) for v in value)
        ):
            at_least = "" if least is None else f" >= {least}"
            raise ConfigError(
                f"{self.where}: {key} must be two whole numbers{at_least}, e.g. {key} = "
                f"{list(default)}; got {value!r}"
            )
        return int(value[0]), int(value[1])

    def __getitem__(self, key: str) -> Any:
        self.read.add(key)
        value = self._checked(key, super().__getitem__(key))
        if isinstance(value, float):  # a key read without a default: a count (in_flight),
            finite(self.where, key, value)  # which int() of infinity failed on (OverflowError)
        return value

    def _like(self, key: str, value: Any, default: Any) -> Any:
        """``value``, refused where its default is a number and it is not one: kinds take
        int() or float() of their settings, which read ``"9"`` as 9 and ``true`` as 1,
        and int() of infinity raised OverflowError. Ranges are each kind's to check."""
        if isinstance(default, bool) or not isinstance(default, int | float):
            return value
        infinite = isinstance(value, float) and isinstance(default, int) and math.isinf(value)
        if isinstance(value, bool) or not isinstance(value, int | float) or infinite:
            raise ConfigError(
                f"{self.where}: {key} must be a {'finite ' if infinite else ''}number (its "
                f"default is {default!r}); got {value!r}"
            )
        return value

    def _checked(self, key: str, value: Any) -> Any:
        # No setting of a kind is a number past 2**53, or NaN: kinds take int() of them
        # (NaN's ValueError), or size arrays by them (a file count of 2**63 ran for ever).
        # Infinity is a setting (request_timeout_s = inf: none); a kind that takes int()
        # of one is refused in _like.
        self.trail.append((self, key, value))  # first: the last read is the one refused
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if not (math.isinf(value) or -MAX_NUMBER <= value <= MAX_NUMBER):
                raise ConfigError(
                    f"{self.named(key, value)}: expected a number, at most 2**53 either side of 0"
                )
        return value

    def __contains__(self, key: object) -> bool:
        if isinstance(key, str):
            self.read.add(key)
        return super().__contains__(key)

    def check_read(self) -> None:
        """Refuse the keys nobody looked up (call after the kind is built)."""
        unknown = [k for k in self if k not in self.read]
        if unknown:
            raise ConfigError(unknown_keys(self.where, unknown, self.read, f"{self.owner} reads"))


#: Epochs with compute each variant's fresh stream runs before those AU counts
#: (:func:`headrace.bench._au.au_epochs`): measured (the report's ``au_warmup``), not in
#: the mean. Here, not in ``_au``, so that a workload's length counts them.
WARMUP_EPOCHS = 1


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
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            # A TOML string or bool here failed below as "'<' not supported ...".
            kinds = (int,) if f.type == "int" else (int, float)
            if isinstance(v, bool) or not isinstance(v, kinds):
                what = "an integer" if f.type == "int" else "a number"
                raise ConfigError(f"train: {f.name} must be {what} (got {v!r})")
            # computation_time = inf ended a run in time.sleep's OverflowError after the
            # dataset was generated, and NaN passed every range check below ("nan s
            # compute", and a bare NaN in the --json report).
            if isinstance(v, float):
                finite("train", f.name, v)
        if self.batch_size < 1 or self.steps < 1 or self.trials < 1 or self.warmup_steps < 0:
            raise ConfigError(
                "train: batch_size, steps and trials must be >= 1 and warmup_steps >= 0 "
                f"(got batch_size={self.batch_size}, steps={self.steps}, trials={self.trials}, "
                f"warmup_steps={self.warmup_steps})"
            )
        if self.computation_time < 0 or self.computation_time_stdev < 0:
            raise ConfigError(
                f"train: computation_time and its stdev must be >= 0 "
                f"(got {self.computation_time}, {self.computation_time_stdev})"
            )
        last = max(1, self.warmup_steps) + self.trials * self.steps
        if self.batch_size * last >= 2**63:
            # A Loader numbers samples as int64: batch_size = 1e20 generated the dataset,
            # then failed in the Loader ("steps [0, 7] ... out of range"), and steps =
            # 1e23 ran on, its end never planned.
            raise ConfigError(
                f"train: batch_size x (warmup_steps + trials x steps) = {self.batch_size:,} x "
                f"{last:,} samples is past 2**63, the most a run can number (sample numbers "
                "are int64): give a smaller batch_size, steps or trials"
            )
        if not 0 <= self.seed < 2**63:  # the loader's range (NumPy's SeedSequence failed)
            raise ConfigError(f"train: seed must be in [0, 2**63) (got {self.seed})")
        if not 0 < self.au_threshold <= 1:
            raise ConfigError(f"train: au_threshold must be in (0, 1] (got {self.au_threshold})")
        if not 0 <= self.rank < self.world_size:
            raise ConfigError(
                f"train: rank must be in [0, world_size) (got rank = {self.rank}, world_size = "
                f"{self.world_size})"
            )


def refuse_bad_variants(variants: Sequence[str], where: str, *, entry: str = "entry") -> None:
    """Refuse a list of variant specs with an entry that names no variant (``""``,
    ``"?prefetch=0"``) or one given twice; ``where`` begins the message (``w.toml``,
    ``--variants 'a,,b'``), ``entry`` names an entry of the list."""
    for i, v in enumerate(variants):
        if not v.partition("?")[0].strip():
            # --variants "naive,,memcpy" ran two variants, the empty one never said; in a
            # file, "" was "unknown variant ''" once the kind was built.
            raise ConfigError(
                f"{where}: {entry} {i + 1} of {len(variants)} ({v!r}) names no variant: begin "
                'each entry with a variant\'s name, its options after "?" (e.g. '
                "headrace?prefetch=0), or drop the entry"
            )
    twice = sorted({v for v in variants if list(variants).count(v) > 1})
    if twice:
        # The runner keys its streams by spec: a second one ended the run in a
        # StopIteration traceback after the dataset was generated.
        raise ConfigError(
            f"{where}: variant {twice[0]!r} is listed more than once; each variant "
            "runs once (more runs: --trials; the same variant with another setting: "
            f"{twice[0].partition('?')[0]}?KEY=VALUE)"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """One benchmark workload: a kind, its dataset and reader options, training, variants."""

    name: str
    kind: str
    train: TrainConfig
    variants: tuple[str, ...]
    description: str = ""
    #: the file it was read from (errors name it); "" for a workload built in code
    source: str = ""
    dataset: Mapping[str, Any] = field(default_factory=dict)
    reader: Mapping[str, Any] = field(default_factory=dict)
    #: The command-line flags that set ``[dataset]`` and ``[reader]`` keys, by section
    #: and key (``{"dataset": {"files": "--files"}}``): messages about such a value name
    #: the flag the user typed, not a key of a file they may never have opened.
    flags: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.variants:
            raise ConfigError(f"{self.where}: the variants list is empty")
        refuse_bad_variants(self.variants, self.where, entry="variants entry")
        if not self.name.strip(".") or any(c in self.name for c in "/\\\0"):
            # It begins a files dataset's folder under the root: name = "../../x" wrote
            # the dataset two folders above --root.
            raise ConfigError(
                f"{self.where}: name {self.name!r} cannot be a path: it begins the dataset's "
                "folder name under --root; give a plain name without '/', e.g. name = "
                '"unet3d-small"'
            )

    @property
    def where(self) -> str:
        """How messages name the workload: its file, else its name."""
        return self.source or f"workload {self.name!r}"

    @property
    def compute_s(self) -> float:
        """Seconds of simulated compute a run of this workload sleeps at the least: each
        variant's warm-up epoch and trials x steps x ``computation_time`` (the AU column's
        pass), one variant after another. A floor on its length known before it starts:
        the reads, which depend on the storage, come on top. The warm-up epoch was left
        out until 2026-12-07: the length said was short of the run by an epoch a variant."""
        t = self.train
        return len(self.variants) * (WARMUP_EPOCHS + t.trials) * t.steps * t.computation_time

    def replace(self, **changes: Any) -> Workload:
        """A copy with top-level fields, or ``dataset``/``reader``/``train`` keys, changed."""
        for section in ("dataset", "reader"):
            if section in changes and isinstance(changes[section], Mapping):
                changes[section] = {**getattr(self, section), **changes[section]}
        if "train" in changes and isinstance(changes["train"], Mapping):
            changes["train"] = dataclasses.replace(self.train, **changes["train"])
        if self.flags and "flags" not in changes:  # a key set again is no flag's now
            changes["flags"] = {
                name: {k: f for k, f in keys.items() if k not in changes.get(name, {})}
                for name, keys in self.flags.items()
            }
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "description": self.description,
            "source": self.source,
            "dataset": dict(self.dataset),
            "reader": dict(self.reader),
            "train": dataclasses.asdict(self.train),
            "variants": list(self.variants),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, where: str = "") -> Workload:
        """A workload from a parsed file; ``where`` (its path) names it in errors."""
        label = where or "<workload>"
        unknown = [k for k in data if k not in TOP_KEYS]
        if unknown:
            raise ConfigError(unknown_keys(label, unknown, TOP_KEYS, "a workload file has"))
        for key in ("kind", "train", "variants"):
            if key not in data:
                raise ConfigError(f"{label}: missing {key!r}")
        for key in ("dataset", "reader", "train"):
            if not isinstance(data.get(key, {}), Mapping):
                raise ConfigError(f"{label}: {key!r} must be a table ([{key}])")
        variants = data["variants"]
        if not isinstance(variants, (list, tuple)) or not all(isinstance(v, str) for v in variants):
            raise ConfigError(
                f"{label}: variants must be a list of variant specs, e.g. variants = "
                '["headrace", "headrace?in_flight=8"] (options go in the spec, after "?"); '
                f"got {variants!r}"
            )
        train = data["train"]
        fields = [f.name for f in dataclasses.fields(TrainConfig)]
        bad = [k for k in train if k not in fields]
        if bad:
            raise ConfigError(unknown_keys(f"{label} [train]", bad, fields, "[train] takes"))
        if "batch_size" not in train:  # was TypeError's "TrainConfig.__init__() missing ..."
            raise ConfigError(
                f"{label} [train]: missing batch_size (samples per step; DLIO's "
                "reader.batch_size), e.g. batch_size = 32"
            )
        try:
            train_config = TrainConfig(**train)
        except (TypeError, ConfigError) as exc:  # name the file, as every other error here
            raise ConfigError(f"{label}: {exc}") from exc
        return cls(
            name=str(data.get("name", os.path.splitext(os.path.basename(label))[0])),
            kind=str(data["kind"]),
            description=str(data.get("description", "")),
            source=where or str(data.get("source", "")),
            dataset=dict(data.get("dataset", {})),
            reader=dict(data.get("reader", {})),
            train=train_config,
            variants=tuple(variants),
        )


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
    # Any path but a folder (a pipe too: -w <(...)): `-w tokens` where a folder "tokens"
    # lies (a dataset's) ended in "[Errno 21] Is a directory: 'tokens'", the built-in out
    # of reach.
    if os.path.exists(name_or_path) and not os.path.isdir(name_or_path):
        try:
            with open(name_or_path, "rb") as f:
                data = tomllib.load(f)
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:  # TOML is UTF-8
            raise ConfigError(f"{name_or_path}: not valid TOML: {exc}") from exc
        return Workload.from_dict(data, where=name_or_path)
    known = builtin_workloads()
    if name_or_path not in known:
        if os.path.isdir(name_or_path):
            raise ConfigError(
                f"workload {name_or_path!r}: a folder, not a workload file; give a workload "
                f"TOML file, or a built-in one by name: {sorted(known)}"
            )
        close = difflib.get_close_matches(name_or_path, sorted(known), n=1)
        raise ConfigError(
            f"unknown workload {name_or_path!r}"
            + (f" (did you mean {close[0]!r}?)" if close else "")
            + f": not a file, and the built-in ones are {sorted(known)}"
        )
    return known[name_or_path]
