"""Workload kinds: a dataset layout plus the variants that read it, side by side.

A kind is a :class:`Kind` subclass registered under a name (``tokens``,
``megatron``, ``files`` ...). Its variants are plain functions registered with
:func:`variant`; adding a way to read a kind's data is one decorated function.
Variants are named in workloads by a *spec*, ``name`` or ``name?key=value&...``
(``headrace-async?prefetch=32``, ``headrace-sync?seed=1``), so sweeps and
deliberately planted mismatches need no new code.
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import importlib
import importlib.util
import math
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol, Self

import numpy as np
from numpy.typing import NDArray

from headrace._messages import unknown_keys
from headrace.bench._datagen import (
    check_room,
    clear_scratch,
    drop_damaged,
    holding_root,
    record_sizes,
)
from headrace.bench._storage import Storage
from headrace.bench._workload import Section, Workload, naming, refuse
from headrace.errors import ConfigError
from headrace.io import CacheStats, ObjectStats
from headrace.pipeline import Loader

__all__ = [
    "DELIVERED",
    "TOKENS_DELIVERED",
    "KINDS",
    "Batch",
    "DigestOrder",
    "GenStream",
    "Kind",
    "Stream",
    "VariantSpec",
    "filled",
    "kind_class",
    "latency_figures",
    "make_kind",
    "store_figures",
    "variant",
]

#: What a workload's GB/s counts unless its kind says otherwise (:meth:`Kind.payload_counts`).
DELIVERED = "the bytes of the batches' arrays, as each variant delivers them"
#: ... for token kinds: x and y share all but one token of each sample.
TOKENS_DELIVERED = (
    "the tokens of the batches, B x (L + 1) x itemsize (x and y shifted: counted once)"
)

Batch = dict[str, NDArray[Any]]
#: How a variant's digest is compared: ``plan`` (the stream, in order), ``any``
#: (its order differs by design: sorted per-sample digests, whole epochs only).
DigestOrder = Literal["plan", "any"]


class Stream(Protocol):
    """An open variant: yields the planned batches; counts the bytes it read.

    ``stats()`` reports what the source can tell about its stages (requests,
    their latencies, time reading and decoding ...); ``{}`` when nothing.
    """

    def __iter__(self) -> Iterator[Batch]: ...

    def bytes_read(self) -> int: ...

    def stats(self) -> dict[str, Any]: ...

    def close(self) -> None: ...


class GenStream:
    """A :class:`Stream` from a batch iterator, a byte counter and optional stage stats."""

    def __init__(
        self,
        batches: Iterator[Batch],
        bytes_read: Callable[[], int],
        close: Callable[[], None] | None = None,
        stats: Callable[[], dict[str, Any]] | None = None,
    ) -> None:
        self._batches = batches
        self._bytes_read = bytes_read
        self._close = close
        self._stats = stats

    def __iter__(self) -> Iterator[Batch]:
        return self._batches

    def bytes_read(self) -> int:
        return self._bytes_read()

    def stats(self) -> dict[str, Any]:
        return self._stats() if self._stats is not None else {}

    def close(self) -> None:
        if self._close is not None:
            self._close()


#: The fewest latencies each percentile is given from (else null): one request in 20 is
#: above a p95, one in 100 above a p99; of fewer they were the slowest request ("59.5/
#: 59.5/59.5" of headrace-cached's one listing request).
_LATENCY_LEAST = {"p50": 1, "p95": 20, "p99": 100}


def latency_figures(lat: Sequence[float]) -> dict[str, Any] | None:
    """``{p50, p95, p99, count}`` of request latencies in seconds: ``count`` of them, a
    percentile null under its fewest (:data:`_LATENCY_LEAST`); ``None`` without any."""
    if not lat:
        return None
    qs = np.percentile(lat, [50, 95, 99]).tolist()
    n = len(lat)
    out: dict[str, Any] = {
        k: q if n >= least else None
        for (k, least), q in zip(_LATENCY_LEAST.items(), qs, strict=True)
    }
    return out | {"count": n}


def store_figures(stats: ObjectStats | None) -> dict[str, Any]:
    """A stream's request figures from its object stores' counters (``{}``: no store).

    ``requests`` (successful calls), ``retries``, ``throttled`` (tries answered
    "slow down"), ``in_flight_observed`` (the most at once) and
    ``request_latency_s`` (:func:`latency_figures`) over the latest requests.
    """
    if stats is None:
        return {}
    return {
        "requests": stats.requests,
        "retries": stats.retries,
        "throttled": stats.throttled,
        "in_flight_observed": stats.max_in_flight_observed,
        "request_latency_s": latency_figures(list(stats.latencies_s)),
    }


class _Options(dict[str, str]):
    """A variant's options that remember which keys its opener asked for.

    An option nobody asks for changes nothing; ``Kind.open`` refuses it, so a typo or a
    ``--sweep`` of a setting the variant does not have cannot pass for a measurement.
    """

    def __init__(self) -> None:
        super().__init__()
        self.asked: set[str] = set()

    def get(self, key: str, default: Any = None) -> Any:
        self.asked.add(key)
        return super().get(key, default)

    def __getitem__(self, key: str) -> str:
        self.asked.add(key)
        return super().__getitem__(key)


@dataclass(frozen=True, slots=True)
class VariantSpec:
    """A variant name and its options, parsed from ``name?key=value&key=value``."""

    name: str
    options: _Options
    text: str

    @classmethod
    def parse(cls, text: str) -> VariantSpec:
        name, _, query = text.partition("?")
        options = _Options()
        for part in filter(None, query.split("&")):
            key, eq, value = part.partition("=")
            if not eq or not key:
                raise ConfigError(f"variant {text!r}: option {part!r} is not key=value")
            if key in options:  # (ran with the last value, under a name that showed both)
                raise ConfigError(
                    f"variant {text!r}: option {key!r} is given twice ({key}={options[key]}, "
                    f"{key}={value}): give each option once"
                )
            options[key] = value
        return cls(name=name, options=options, text=text)

    def int(self, key: str, default: int) -> int:
        value = self.options.get(key)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError as exc:
            raise ConfigError(f"variant {self.text!r}: {key}={value!r} is not an integer") from exc


Opener = Callable[[Any, VariantSpec, int], Stream]
#: Reads one of a variant's own options from its spec, refusing a value it cannot take.
OptionCheck = Callable[[VariantSpec], object]


def variant(
    kind: type[Kind],
    name: str,
    *,
    digest: bool = True,
    order: DigestOrder = "plan",
    group: str = "",
    memory: bool = False,
    options: Mapping[str, OptionCheck] | None = None,
) -> Callable[[Opener], Opener]:
    """Register ``fn(kind, spec, steps) -> Stream`` as variant ``name`` of ``kind``.

    ``digest=False`` marks a variant whose output is not the planned batches
    (a bare copy): its digest is not compared. Variants agree within their
    ``group`` (raw file bytes are compared with raw file bytes, not with
    decoded arrays); ``order="any"`` compares the variant on sorted
    per-sample digests, for readers whose order differs by design. ``memory=True``
    marks a copy from memory by design (memcpy): never judged against the storage ceiling.
    ``options``: the variant's own options besides the ``[reader]`` keys and ``?seed``
    (``?reads=pread``), each with the function that reads it from a spec and refuses a
    value it cannot take: :meth:`Kind.check_variants` runs them before anything is
    written, and the opener reads its options through them.
    """

    def register(fn: Opener) -> Opener:
        kind.openers[name] = fn
        if not digest:
            kind.undigested = kind.undigested | {name}
        if memory:
            kind.from_memory = kind.from_memory | {name}
        kind.rules[name] = (group, order)
        kind.variant_options[name] = dict(options or {})
        return fn

    return register


class Kind:
    """Base of workload kinds: a dataset under ``root`` and ways to read it.

    Build one with :meth:`make` (or :func:`make_kind`): a subclass reads every
    ``[dataset]`` and ``[reader]`` setting it has in its constructor, from the
    ``workload`` it is given; :meth:`make` then refuses any key it did not read.
    """

    openers: ClassVar[dict[str, Opener]]
    #: each variant's own options (see :func:`variant`)
    variant_options: ClassVar[dict[str, dict[str, OptionCheck]]]
    undigested: ClassVar[frozenset[str]] = frozenset()
    from_memory: ClassVar[frozenset[str]] = frozenset()
    rules: ClassVar[dict[str, tuple[str, DigestOrder]]]
    #: also digest each sample (sorted: order-independent); costs a second hash
    canonical_digests: ClassVar[bool] = False
    #: where the dataset is read from, for kinds that can serve it from S3 (set in __init__)
    store: Storage | None = None
    #: variants that read the object store through a local cache made for the run
    cached_variants: ClassVar[frozenset[str]] = frozenset()
    #: (module, extra) a kind's dataset or variants import: checked by :meth:`make`, so a
    #: missing one is refused before anything is written, naming the pip install
    extras: ClassVar[tuple[tuple[str, str], ...]] = ()

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        cls.openers = {}
        cls.variant_options = {}
        cls.undigested = frozenset()
        cls.from_memory = frozenset()
        cls.rules = {}

    def __init__(self, workload: Workload, root: str) -> None:
        self.workload = workload
        self.root = os.fspath(root)
        # Every Loader a variant opened, for its stage times (measure_pass clears it).
        self.loaders: list[Loader] = []
        # The variants that opened a Loader with a read-ahead queue (prefetch > 0).
        self.reading_ahead: set[str] = set()
        refuse(
            workload.reader,
            "threads",
            "I/O threads are one pool per process: set HEADRACE_IO_THREADS (default 8; the "
            "storage ceiling reads with as many); files workloads set in_flight (reads at once) "
            "and decode_threads",
        )
        for text in workload.variants:
            spec = VariantSpec.parse(text)
            if spec.name not in self.openers:
                close = difflib.get_close_matches(spec.name, sorted(self.openers), n=1)
                raise ConfigError(
                    f"workload {workload.name!r}: unknown variant {spec.name!r}"
                    + (f" (did you mean {close[0]!r}?)" if close else "")
                    + f" for kind {workload.kind!r}; known: {sorted(self.openers)}"
                )

    @classmethod
    def make(
        cls, workload: Workload, root: str, *, variants: bool = True, reader_where: str = ""
    ) -> Self:
        """``cls(workload, root)``, then refuse the ``[dataset]``/``[reader]`` keys it never
        read, and (``variants``) the variants' options it could not open
        (:meth:`check_variants`).

        The kind is given sections that record each key looked up (:class:`Section`),
        so the keys a kind knows are the ones its constructor reads: no list to keep.
        ``reader_where`` names the ``[reader]`` in errors (a variant's options over it).
        """
        # A bare "No module named 'pyarrow'" came from the dataset generator, after the
        # plan was printed (`headrace bench -w table` on a NumPy-only install).
        missing = [(m, e) for m, e in cls.extras if importlib.util.find_spec(m) is None]
        if missing:
            raise ConfigError(
                f"workload {workload.name!r} (kind {workload.kind!r}) needs "
                f"{' and '.join(m for m, _ in missing)}, which "
                f"{'is' if len(missing) == 1 else 'are'} not installed: pip install "
                f"'headrace[{','.join(dict.fromkeys(e for _, e in missing))}]'"
            )
        owner = f"the {workload.kind} kind"
        trail: list[tuple[Section, str, Any]] = []
        ds, rd = (
            Section(
                getattr(workload, name),
                where=(name == "reader" and reader_where) or f"{workload.where} [{name}]",
                owner=owner,
                trail=trail,
                flags=workload.flags.get(name),
            )
            for name in ("dataset", "reader")
        )
        try:
            kind = cls(dataclasses.replace(workload, dataset=ds, reader=rd), root)
        except ConfigError as exc:
            # A ValueError too, but already says which setting and why; where the kind's
            # own check met a value a flag gave (--token-file-gib 1e-9: "token file of 0
            # tokens is too small"), it named the workload's file, not the flag typed.
            flagged = _flagged(trail, str(exc))
            if flagged is None:
                raise
            raise ConfigError(f"{flagged}: {exc}") from exc
        except (TypeError, ValueError) as exc:
            # A value of the wrong type (dtype = "float77", files = "x"), met by the kind's
            # int()/float()/np.dtype() as it reads its settings: name the setting, not the
            # conversion (a bare "invalid literal for int()", or a traceback for a TypeError).
            if not trail:
                raise
            section, key, value = trail[-1]
            raise ConfigError(
                f"{section.named(key, value)} cannot be used: {exc} (check its type and range)"
            ) from exc
        ds.check_read()
        rd.check_read()
        if variants:
            kind.check_variants()
        return kind

    def check_variants(self) -> None:
        """Refuse what opening each of the run's variants would refuse, before anything is
        written: an option nothing reads, a value the option or the ``[reader]`` setting it
        overrides cannot take (``?prefetch=abc``, ``?block_mib=0``), a seed out of range.

        :meth:`make` runs it, so ``bench --list`` and ``headrace.cli.check`` refuse them
        too: :meth:`open` refused them in the run, once the dataset had been generated.
        """
        for text in self.workload.variants:
            vs = VariantSpec.parse(text)
            self._variant_kind(vs)  # its [reader] keys, as the variant sets them
            own = self.variant_options.get(vs.name, {})
            known = set(self._reader_keys()) | set(own) | {"seed"}
            self._refuse_unused(vs, sorted(set(vs.options) - known), known)
            for key, check in own.items():
                if key in vs.options:
                    check(vs)
            seed = self.seed_of(vs)
            if not 0 <= seed < 2**63:  # [train] seed's range (the loader's)
                raise ConfigError(f"variant {text!r}: seed must be in [0, 2**63) (got {seed})")

    def _reader_keys(self) -> dict[str, Any]:
        """The ``[reader]`` settings a variant option may override, as the kind has them
        (those the file sets, and those it leaves at the kind's default)."""
        reader = self.workload.reader
        # Where the dataset is served from is the run's, not a variant's to change.
        return {
            k: v for k, v in {**getattr(reader, "defaults", {}), **reader}.items() if k not in _RUN
        }

    def _variant_kind(self, vs: VariantSpec) -> Kind:
        """This kind, or one built with the ``[reader]`` keys ``vs``'s options override
        (checked as the file's are; errors name the variant)."""
        current = self._reader_keys()
        over = {k: _like(current[k], v, vs.text, k) for k, v in vs.options.items() if k in current}
        if not any(current[k] != v for k, v in over.items()):
            return self
        where = f"{self.workload.where}: variant {vs.text!r}"
        try:
            kind = type(self).make(
                self.workload.replace(reader=over), self.root, variants=False, reader_where=where
            )
        except ConfigError as exc:
            if vs.text in str(exc):
                raise
            raise ConfigError(f"variant {vs.text!r}: {exc}") from exc
        kind.loaders = self.loaders  # its Loaders' stage times are this variant's
        kind.reading_ahead = self.reading_ahead
        return kind

    def _refuse_unused(self, vs: VariantSpec, unused: list[str], known: set[str]) -> None:
        if unused:
            raise ConfigError(
                unknown_keys(
                    f"{self.workload.where}: variant {vs.text!r}",
                    unused,
                    known,
                    f"nothing reads it, so it would change nothing; variant {vs.name!r} of the "
                    f"{self.workload.kind} kind takes (its own options and the [reader] keys)",
                    what="option",
                )
            )

    # -- dataset ------------------------------------------------------------------
    def generate(self, progress: Callable[[int, int], None] | None = None) -> None:
        """Write the dataset under ``root`` unless a valid copy is there (resumable)."""
        raise NotImplementedError

    def bytes_to_write(self) -> int:
        """The bytes :meth:`generate` would write now: what is missing, not what is there
        and valid (the generators keep it); an estimate where encoding decides the size."""
        raise NotImplementedError

    def least_bytes_to_write(self) -> int:
        """A lower bound of :meth:`bytes_to_write` that takes a moment at any size (none
        by default: the exact count is quick for one file)."""
        return 0

    def write(
        self, progress: Callable[[int, int], None] | None = None, *, flag: str = "--root"
    ) -> None:
        """:meth:`generate`, after removing any file of the dataset whose size differs from
        the one it had when last written whole, and refusing (before writing anything) a
        dataset whose missing bytes the filesystem has no room for (``flag`` names the
        folder in that error); then remember the sizes."""
        os.makedirs(self.root, exist_ok=True)
        with holding_root(self.root):  # a second gen or bench here waits (see holding_root)
            clear_scratch(self.root)
            files = self.dataset_files()
            drop_damaged(self.root, files)
            room_for(self.root, [self], flag=flag)
            self.generate(progress)
            record_sizes(self.root, self.dataset_files())

    def files(self) -> list[str]:
        """The dataset's files (after :meth:`generate`)."""
        raise NotImplementedError

    def dataset_files(self) -> list[str]:
        """Every local file a copy of the dataset needs: :meth:`files` and any manifest."""
        return self.files()

    def check_run(self) -> None:
        """Refuse, before any dataset is written, settings the run's variants cannot run
        (``headrace bench``; ``headrace gen`` writes the dataset whatever the variants)."""

    def listed_extensions(self) -> tuple[str, ...] | None:
        """Where the variants list the served prefix and read what they find: the object
        name endings they take (``()``: every object); None where they read named objects."""
        return None

    def dataset_bytes(self) -> int:
        return sum(os.path.getsize(p) for p in self.files())

    def record_bytes(self) -> float:
        """Mean payload bytes of one sample, as delivered."""
        raise NotImplementedError

    def payload_bytes(self, start: int, stop: int) -> int:
        """Payload bytes of this host's batches of steps ``[start, stop)``."""
        return round(self.record_bytes() * self.host_batch * (stop - start))

    def stored_per_payload(self) -> float:
        """Stored bytes per payload byte delivered (decoded rows are wider than stored)."""
        return 1.0

    def payload_counts(self) -> str:
        """What this workload's GB/s (and MB/s) count, the same for every variant: by
        default :data:`DELIVERED`, the bytes of the batches' arrays as delivered."""
        return DELIVERED

    def unique_payload_bytes(self, steps: int) -> int:
        """Stored bytes the first ``steps`` batches need at least: amplification's yardstick."""
        return self.payload_bytes(0, steps)

    def batch_payload_bytes(self, batch: Batch) -> int | None:
        """Payload bytes of one batch as delivered, counted on its arrays (the model
        :meth:`record_bytes` states), or ``None`` where the arrays do not show them."""
        return sum(a.nbytes for k, a in batch.items() if k != "index")

    # -- variants -----------------------------------------------------------------
    @property
    def host_batch(self) -> int:
        t = self.workload.train
        return t.batch_size // t.world_size

    def digested(self, spec: str) -> bool:
        return VariantSpec.parse(spec).name not in self.undigested

    def digest_rule(self, spec: str) -> tuple[str, DigestOrder]:
        """(group, order) ``spec``'s digest is compared by (see :func:`variant`)."""
        return self.rules.get(VariantSpec.parse(spec).name, ("", "plan"))

    def digest_steps(self, steps: int) -> int:
        """Steps the digest pass reads for a run of ``steps`` (a kind may round up)."""
        return steps

    def canonical_comparable(self, steps: int) -> bool:  # noqa: ARG002
        """Whether every variant delivers the same multiset of samples in ``steps`` steps."""
        return False

    def open(self, spec: str, steps: int) -> Stream:
        """Open variant ``spec`` for ``steps`` batches from step 0.

        Options that name a ``[reader]`` key (``?block_mib=1``, ``?in_flight=8``)
        override it for this variant, so ``--sweep`` reaches any reader setting,
        also one the file leaves at the kind's default (``?odirect=true``).
        """
        vs = VariantSpec.parse(spec)
        kind = self._variant_kind(vs)
        stream = kind.openers[vs.name](kind, vs, steps)
        # every variant takes ?seed (Kind.seed_of), often read lazily by its generator
        known = set(self._reader_keys()) | vs.options.asked | {"seed"}
        try:
            self._refuse_unused(vs, sorted(set(vs.options) - known), known)
        except ConfigError:
            stream.close()
            raise
        return stream

    def reads_cache(self) -> bool:
        """Whether a variant of the run reads through an object cache (``cached_variants``)."""
        return any(
            VariantSpec.parse(v).name in self.cached_variants for v in self.workload.variants
        )

    def check_cache_storage(self) -> None:
        """Refuse a cached variant where there is no object store to cache (call once
        ``store`` is set)."""
        if self.reads_cache() and (self.store is None or not self.store.remote):
            names = sorted(self.cached_variants)
            raise ConfigError(
                f"workload {self.workload.name!r}: variant {names[0]!r} reads an object store "
                "through a local cache; with storage = 'local' there is no store to cache: "
                "use --storage s3 or drop the variant"
            )

    def fill_cache(self, directory: str) -> dict[str, Any]:
        """Read the whole dataset from its store into an object cache at ``directory``:
        ``{"entries": ..., "bytes": ...}`` written (kinds with ``cached_variants``)."""
        raise NotImplementedError

    def serve(self) -> contextlib.AbstractContextManager[None]:
        """Make the dataset reachable for a run (start a local object store ...)."""
        return contextlib.nullcontext() if self.store is None else self.store.serve(self)

    @property
    def storage(self) -> str:
        """Where the variants read from: ``local`` or an object store's scheme."""
        return "local" if self.store is None else self.store.kind

    def result_extras(self, spec: str) -> dict[str, Any]:
        """Kind-specific fields added to ``spec``'s result (a table's ``open_s``); a cached
        variant's ``cache_fill`` (what filling the run's cache took)."""
        if self.store is None:
            return {}
        extras = self.store.result_extras()
        if VariantSpec.parse(spec).name in self.cached_variants and self.store.cache_fill:
            extras["cache_fill"] = self.store.cache_fill
        return extras

    def seed_of(self, spec: VariantSpec) -> int:
        return spec.int("seed", self.workload.train.seed)

    def loader(self, src: Any, spec: VariantSpec, steps: int, **options: Any) -> Loader:
        """A :class:`~headrace.pipeline.Loader` over ``src`` for this host's ``steps`` steps.

        ``options`` (``prefetch``, ``chunk_steps``) go to the Loader as given;
        left out, the Loader's defaults apply, as users get them.
        """
        t = self.workload.train
        loader = Loader(
            src,
            batch_size=t.batch_size,
            seed=self.seed_of(spec),
            rank=t.rank,
            world_size=t.world_size,
            steps=steps,
            **options,
        )
        self.loaders.append(loader)
        if loader.prefetch > 0:
            self.reading_ahead.add(spec.text)
        return loader


def _flagged(trail: Sequence[tuple[Section, str, Any]], message: str) -> str | None:
    """The flag and value (``--files 64``) of the setting a kind read last, where a flag
    gave it and ``message`` names no flag already; else None."""
    if not trail:
        return None
    section, key, value = trail[-1]
    if key not in section.flags or any(
        flag in message for s, _, _ in trail for flag in s.flags.values()
    ):
        return None
    return section.named(key, value)


def filled(stats: CacheStats | None) -> dict[str, Any]:
    """What a kind's ``fill_cache`` wrote, from its source's cache counters."""
    assert stats is not None  # the source was opened with cache_dir
    return {"entries": stats.written, "bytes": stats.written_bytes}


# [reader] keys that say where the run's dataset is served from: one per run.
_RUN = frozenset(
    {
        "storage",
        "storage_url",
        "endpoint",
        "latency_ms",
        "max_concurrent",
        "request_attempts",
        "request_timeout_s",
        "store_options",
        "served_store_options",
        "cache_dir",
        "cache_run_dir",
    }
)


def _like(current: Any, text: str, spec: str, key: str) -> Any:
    """``text`` parsed as the type of the reader value it overrides."""
    try:
        if isinstance(current, bool):
            word = text.lower()
            if word not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
                raise ValueError(text)
            return word in ("1", "true", "yes", "on")
        if isinstance(current, (int, float)):
            # an int setting may take a fraction (block_mib=0.5): keep what parses
            number = float(text)
            return int(number) if number.is_integer() and isinstance(current, int) else number
        if current is None:
            # A setting the file leaves at a default of None ("the kind decides": the files
            # kind's in_flight) has no type to go by: a number is read as one. '8' stayed
            # text, and ?in_flight=8 was refused as "must be a whole number; got '8'".
            with contextlib.suppress(ValueError):
                return int(text)
            with contextlib.suppress(ValueError):
                number = float(text)
                if math.isfinite(number):
                    return number
    except ValueError as exc:
        # It said "'x' is not a int like the reader's 8": the type's name, not what to give.
        what = {bool: "true or false", int: "a number", float: "a number"}
        raise ConfigError(
            f"variant {spec!r}: {key}={text!r} is not {what[type(current)]}, as the "
            f"reader's {key} is ({current!r}); give one, e.g. {key}={current!r}".replace(
                "=True", "=true"
            ).replace("=False", "=false")
        ) from exc
    return text


# name -> "module:Class", or a reason the kind cannot run yet (another engineer builds it).
KINDS: dict[str, str] = {
    "tokens": "headrace.bench._tokens_kind:TokenKind",
    "megatron": "headrace.bench._tokens_kind:MegatronKind",
    "files": "headrace.bench._files_variants:FilesKind",
    "rows": "headrace.bench._rows_kind:PaddedKind",
    "tables": "headrace.bench._rows_kind:TableKind",
    "parquet": "headrace.bench._parquet_kind:ParquetKind",
    "table-images": "headrace.bench._table_images_kind:TableImagesKind",
    "packed": "headrace.bench._packed_kind:PackedKind",
}


def kind_class(name: str) -> type[Kind]:
    target = KINDS.get(name)
    if target is None:
        raise ConfigError(f"unknown workload kind {name!r}; known: {sorted(KINDS)}")
    if target.startswith("!"):
        raise ConfigError(f"workload kind {name!r} cannot run yet: {target[1:].strip()}")
    module, _, cls = target.partition(":")
    found = getattr(importlib.import_module(module), cls)
    assert isinstance(found, type) and issubclass(found, Kind)
    return found


def make_kind(workload: Workload, root: str) -> Kind:
    """The kind of ``workload`` over ``root``, its settings checked (:meth:`Kind.make`)."""
    with naming(workload):
        return kind_class(workload.kind).make(workload, root)


def room_for(root: str, kinds: Sequence[Kind], *, flag: str = "--root") -> None:
    """Refuse datasets whose missing bytes ``root`` has no room for, all at once: by their
    lower bound first, so a million-file dataset that cannot fit is refused in a moment,
    then by :meth:`Kind.bytes_to_write`."""
    check_room(root, sum(k.least_bytes_to_write() for k in kinds), flag=flag, at_least=True)
    check_room(root, sum(k.bytes_to_write() for k in kinds), flag=flag)
