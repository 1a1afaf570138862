"""A Source that mixes sources by weight (see :class:`headrace.plan.MixturePlan`).

Global sample ``t * B + p`` is decoded with the mixture's own global batch
``B``: the plan says which source fills position ``p`` of step ``t`` and which
of that source's samples it is (its local sample number, counted over the
whole run). Each source reads its samples with its own seed, derived from
``(seed, source)``, so its per-epoch permutations are keyed by
``(seed, source, epoch)`` and its epochs advance independently. Every batch
carries ``source``, each sample's source id.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from functools import lru_cache
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace._closing import Closing
from headrace.errors import ConfigError, DataError
from headrace.io._batch import results
from headrace.io._pool import source_pool
from headrace.pipeline._layout import Batch, nbytes, ragged_keys, widened
from headrace.pipeline._loader_args import check_source
from headrace.pipeline._loader_types import Source
from headrace.pipeline._locks import source_lock
from headrace.pipeline._mixture_ragged import merge_parts
from headrace.pipeline._passes import epoch_parts, first_steps
from headrace.pipeline._transform import checked_rows
from headrace.plan import MixturePlan, derive_keys

__all__ = ["Mixture"]

_TAG_SOURCE = 0x53524345
_MAX_SAMPLE = (1 << 63) - 1


# Sources of a read are read side by side (see Mixture._read_sources); False: one
# after another, as releases before did (benchmarks/mixture_slowfs.py's A side).
_SIDE_BY_SIDE = True


@lru_cache(maxsize=1024)
def source_seed(seed: int, source: int) -> int:
    """The seed source ``source`` reads with: a hash of ``(seed, source)``, in [0, 2**63)."""
    return int(derive_keys(_TAG_SOURCE, seed, source, n=1)[0]) >> 1


# Sources whose dtype= sets the dtype of what they give (a TokenSource's names its files').
_OUT_DTYPE = frozenset({"PaddedRows", "PairRows"})


class Mixture(Closing):
    """Sources of one shape family (same keys, dtypes and trailing shapes), mixed by weight.

    ``sources`` is a sequence (ids 0, 1, ...) or a mapping of names to
    sources (ids in its order; ``names`` keeps them). ``batch_size`` must be
    the loader's global batch size: the mixture decodes sample numbers with
    it, and ``read`` refuses sample numbers that cannot come from it.
    ``schedule`` (a curriculum): ``{step: weights}``, the weights from that step
    on, each source going on from the sample it had reached; a weight of 0 keeps
    a source out (see :class:`headrace.plan.MixturePlan`).
    """

    def __init__(
        self,
        sources: Sequence[Source] | Mapping[str, Source],
        weights: Iterable[float] | Mapping[str, float] | NDArray[np.floating[Any]],
        *,
        batch_size: int,
        schedule: Mapping[int, Iterable[float] | Mapping[str, float] | NDArray[np.floating[Any]]]
        | None = None,
    ) -> None:
        if isinstance(sources, Mapping):
            self.names = [str(k) for k in sources]
            self.sources = list(sources.values())
        else:
            self.sources = list(sources)
            self.names = [str(i) for i in range(len(self.sources))]
        if not self.sources:
            raise ConfigError("Mixture needs at least one source.")
        twice = sorted({n for n in self.names if self.names.count(n) > 1})
        if twice:
            # Names key the fingerprint's sources and the weights by name: two sources
            # of one name would be described (and weighted) as one.
            raise ConfigError(
                f"Mixture: source names must differ as strings; {twice} names more than "
                f"one source (names: {list(sources)!r})."
            )
        for n, src in zip(self.names, self.sources, strict=True):
            try:
                check_source(src, None)
            except ConfigError as exc:  # built, a Loader over it raised AttributeError
                raise ConfigError(
                    f"Mixture: source {n!r} {str(exc).removeprefix('source ')}"
                ) from None
        nested = [
            n for n, src in zip(self.names, self.sources, strict=True) if isinstance(src, Mixture)
        ]
        if nested:
            # Its reads would be of the outer mixture's local sample numbers, no host
            # slices of steps of its own batch, on the pool the outer read waits on.
            raise ConfigError(
                f"Mixture: source {nested[0]!r} is itself a Mixture; mixtures do not nest. "
                "Mix the inner mixture's sources in this one, each weighted by its weight in "
                "it times the inner mixture's weight here (as fractions of their totals)."
            )
        weights = self._weights_in_order(sources, weights)
        if len(weights) != len(self.sources):
            raise ConfigError(
                f"Mixture got {len(self.sources)} sources but {len(weights)} weights; give one "
                "weight per source."
            )
        phases = self._schedule_in_order(sources, schedule)
        try:
            self.plan = MixturePlan(weights, batch_size, names=self.names, schedule=phases)
        except ValueError as exc:
            raise ConfigError(f"Mixture: {exc}") from exc
        self.batch_size = self.plan.batch_size
        self._check_ignore_index()
        self._check_classes()
        self._layout: dict[str, tuple[np.dtype[Any], tuple[int, ...], str]] = {}
        # Keys whose samples may differ in shape (images of several sizes): what a
        # source declares (``ragged_keys``) and what any read gave as object arrays.
        self._ragged: set[str] = {
            k for src in self.sources for k in getattr(src, "ragged_keys", ())
        }
        self._last: tuple[int, NDArray[np.int64], NDArray[np.int64], NDArray[np.int64]] | None = (
            None
        )
        # Bytes the last read's parts held as their sources read them (see Mapped).
        self.held_bytes = 0
        # Each source's prefetch parameters, by index: inspect.signature costs ~20 us, a
        # source met in each chunk of every bounded run (told its end).
        self._takes: dict[int, frozenset[str]] = {}

    def _check_ignore_index(self) -> None:
        """Row sources that mark ignored targets in ``y`` mark them alike: a loss ignores
        one value, and a batch holding two would feed the other to it as a class."""
        marks = {
            n: int(v)
            for n, src in zip(self.names, self.sources, strict=True)
            if isinstance(v := getattr(src, "ignore_index", None), int | np.integer)
        }
        if len(set(marks.values())) > 1:
            found = ", ".join(f"{v} in {n!r}" for n, v in marks.items())
            raise ConfigError(
                f"Mixture: sources mark ignored targets (y, labels) with different values "
                f"(ignore_index: {found}); a loss ignores one value and would take the "
                "others as token ids: give every source the same ignore_index (-100 for "
                "PyTorch's cross_entropy and Hugging Face models); a Mapped source whose fn "
                "marks them otherwise says so with Mapped(source, fn, ignore_index=...)."
            )

    def _check_classes(self) -> None:
        """Sources that name a column's classes (a table's ``ClassLabel``, a file
        source's ``labels=`` classes) name the same classes in the same order: label 0
        of one would otherwise share a batch with label 0 of another that means another
        class, and a shared head learn both as one."""
        seen: dict[str, tuple[str, tuple[str, ...]]] = {}
        for n, src in zip(self.names, self.sources, strict=True):
            found = getattr(src, "classes", None)
            if isinstance(found, tuple | list) and all(isinstance(c, str) for c in found):
                found = {"label": found}  # a FileSource's labels: its "label" key's
            for column, names in found.items() if isinstance(found, Mapping) else ():
                first = seen.setdefault(column, (n, tuple(names)))
                if first[1] != tuple(names):
                    raise ConfigError(
                        f"Mixture: sources {first[0]!r} and {n!r} name the classes of "
                        f"column {column!r} differently ({first[0]!r}: "
                        f"{list(first[1])}; {n!r}: {list(names)}), so one label number "
                        "means two classes in one batch: align them before reading, with "
                        "datasets' ds.align_labels_with_mapping({name: id, ...}, "
                        f"{column!r}) then save_to_disk (file sources: give each "
                        "classes= the same list), or map one source's labels with "
                        "Mapped(source, fn)."
                    )

    def _weights_in_order(
        self,
        sources: Sequence[Source] | Mapping[str, Source],
        weights: Iterable[float] | Mapping[str, float] | NDArray[np.floating[Any]],
    ) -> Sequence[float] | NDArray[np.floating[Any]]:
        """``weights`` as a list in the sources' order: a mapping is taken by name."""
        if isinstance(weights, np.ndarray):
            if weights.ndim != 1:
                raise ConfigError(
                    f"Mixture: weights must be numbers, one per source (got ndarray of "
                    f"shape {weights.shape})."
                )
            return weights
        if (
            isinstance(weights, str | bytes | AbstractSet)
            or not isinstance(weights, Iterable)
            or (not isinstance(weights, Mapping) and hasattr(weights, "keys"))
        ):
            # A set has no order; a pandas Series has keys: by name or in order? Said,
            # not guessed.
            raise ConfigError(
                f"Mixture: weights must be a list of numbers, one per source, or a dict of "
                f"them by source name (got {type(weights).__name__} {weights!r:.200})."
            )
        if not isinstance(weights, Mapping):
            # dict.values(), a generator: taken in order, as a list is
            return weights if isinstance(weights, Sequence) else list(weights)
        if not isinstance(sources, Mapping):
            raise ConfigError(
                "Mixture: weights by name need sources by name (a dict); give a list of "
                f"weights in the sources' order instead (got {dict(weights)!r})."
            )
        given = [str(k) for k in weights]
        twice = sorted({n for n in given if given.count(n) > 1})
        if twice:
            raise ConfigError(
                f"Mixture: weights name {', '.join(map(repr, twice))} twice (as strings: "
                f"{list(weights)!r}); give one weight per source name."
            )
        if sorted(given) != sorted(self.names):
            # Until 2026-12-03 it named only the unknown names: "weights name []" for a
            # weight left out.
            wrong = {
                "unknown": sorted(set(given) - set(self.names)),
                "missing": sorted(set(self.names) - set(given)),
            }
            raise ConfigError(
                f"Mixture: weights name {given} but the sources are {self.names} ("
                + "; ".join(f"{what}: {names}" for what, names in wrong.items() if names)
                + "); give one weight per source name."
            )
        by_name = {str(k): v for k, v in weights.items()}
        return [by_name[n] for n in self.names]

    def _schedule_in_order(
        self,
        sources: Sequence[Source] | Mapping[str, Source],
        schedule: Mapping[int, Iterable[float] | Mapping[str, float] | NDArray[np.floating[Any]]]
        | None,
    ) -> dict[int, Sequence[float] | NDArray[np.floating[Any]]] | None:
        """``schedule`` with each step's weights as a list in the sources' order."""
        if schedule is None or not isinstance(schedule, Mapping):
            return schedule  # the plan refuses what is no dict, by name
        out = {}
        for step, w in schedule.items():
            try:
                out[step] = self._weights_in_order(sources, w)
            except ConfigError as exc:
                raise ConfigError(
                    f"Mixture: schedule step {step}: {str(exc).removeprefix('Mixture: ')}"
                ) from None
        return out

    def __repr__(self) -> str:
        total = sum(self.plan.numerators)
        parts = ", ".join(
            f"{n!r}: {s!r} x {w / total:.3g}"
            for n, s, w in zip(self.names, self.sources, self.plan.numerators, strict=True)
        )
        phases = ", ".join(
            f"{step}: [{', '.join(f'{w / total:.3g}' for w in nums)}]"
            for step, nums in self.plan.schedule
        )
        schedule = f", schedule={{{phases}}}" if phases else ""
        return f"Mixture({{{parts}}}, batch_size={self.batch_size}{schedule})"

    def fingerprint(self) -> dict[str, Any]:
        out = {
            "kind": "mixture",
            "batch_size": self.batch_size,
            "weights": list(self.plan.numerators),
            "sources": {n: s.fingerprint() for n, s in zip(self.names, self.sources, strict=True)},
            # Source ids and seeds follow this order, and the digest sorts the keys of
            # "sources": without it, the same sources and weights in another order (a
            # dict built from a directory listing) resumed as if they were the stream saved.
            "order": list(self.names),
        }
        if self.plan.schedule:  # only then: states saved without one stay valid
            out["schedule"] = [[k, list(nums)] for k, nums in self.plan.schedule]
        return out

    @property
    def samples_per_epoch(self) -> int:
        """Not one number: each source has its own epoch (see :meth:`epoch_steps`)."""
        # AttributeError, so getattr(source, "samples_per_epoch", None) still says "none".
        raise AttributeError(
            "a Mixture has no samples_per_epoch: each source walks its own epochs at the "
            f"pace its weight sets ({', '.join(self.names)}). mix.epoch_steps() gives the "
            "steps each source takes to read one epoch, mix.epochs_at(step) the epochs each "
            "has read by a step, and Loader(mix, ..., epochs=1) ends when every source has "
            "read one (len() of it is that step count)."
        )

    def epoch_steps(self, epochs: int = 1) -> dict[str, int | None]:
        """For each source, by name: the steps from step 0 after which it has read
        ``epochs`` epochs of its own samples (its ``samples_per_epoch`` times ``epochs``)
        under the weights and schedule; ``None`` where it never does (weight 0 from some
        phase on). Closed form (the plan's counts, :meth:`MixturePlan.first_steps`): no
        I/O, the same on every host."""
        if isinstance(epochs, bool) or not isinstance(epochs, int | np.integer) or epochs < 1:
            raise ConfigError(f"epochs must be an integer >= 1 (got {epochs!r}).")
        sizes = np.array([n for _, _, n in epoch_parts(self, "epoch_steps()")], dtype=np.int64)
        if int(epochs) > _MAX_SAMPLE // int(sizes.max()):
            raise ConfigError(
                f"epochs={epochs} of the largest source ({int(sizes.max())} samples) passes "
                "2**63 - 1 samples, the most a plan numbers"
            )
        first = first_steps(self, sizes * int(epochs), f"epoch_steps({epochs})")
        return {n: (int(t) if t >= 0 else None) for n, t in zip(self.names, first, strict=True)}

    def epochs_at(self, step: int) -> dict[str, float]:
        """For each source, by name: the epochs of its own samples read by the steps
        before ``step`` (its samples read, over its ``samples_per_epoch``). Closed form."""
        if isinstance(step, bool) or not isinstance(step, int | np.integer) or step < 0:
            raise ConfigError(f"step must be an integer >= 0 (got {step!r}).")
        if int(step) > _MAX_SAMPLE // self.batch_size:
            raise ConfigError(
                f"step {step} of {self.batch_size} samples passes 2**63 - 1 samples, the "
                "most a plan numbers"
            )
        sizes = [n for _, _, n in epoch_parts(self, "epochs_at()")]
        read = self.plan.cumulative(int(step) * self.batch_size).tolist()
        return {n: r / size for n, r, size in zip(self.names, read, sizes, strict=True)}

    def check_batch_size(self, batch_size: int) -> None:
        """Raise unless ``batch_size`` (a loader's global batch) is the mixture's."""
        if batch_size != self.batch_size:
            raise ConfigError(
                f"Mixture(batch_size={self.batch_size}) cannot serve a loader with "
                f"batch_size={batch_size}: the mixture decodes sample numbers with its own "
                "global batch size. Build both with the same one."
            )

    def check_samples(self, samples: NDArray[np.int64]) -> None:
        """Refuse sample numbers that cannot be host slices of steps of this batch size.

        The loader asks, for each step ``t`` of a chunk, for the same number of
        positions of its global batch (``[lo, hi)`` in plan order; its
        stretch of the step sorted by address under ``host_order="address"``).
        Decoded with the wrong batch size the counts come out ragged (a loader
        batch of 48 read as steps of 32 gives 32 samples of one step, then
        16). A loader batch that is a whole multiple of ``B`` cannot be told
        apart this way, but it reads the same samples on every host count, so
        determinism holds; only the per-step proportions coarsen.
        """
        if samples.size == 0:
            return
        b = self.batch_size
        _, count = np.unique(samples // b, return_counts=True)
        if int(count.min()) != int(count.max()):
            raise ConfigError(
                f"Mixture(batch_size={b}) was asked for samples {samples[:4].tolist()}... that "
                f"are not host slices of steps of {b} samples: the loader's batch_size "
                f"differs from the mixture's. Build both with the same global batch size."
            )

    def read(self, seed: int, samples: NDArray[np.int64]) -> Batch:
        samples = np.asarray(samples, dtype=np.int64)
        self.check_samples(samples)
        if not self._layout:
            self._check_layouts(seed)
        source, local = self._locate(seed, samples)
        n = samples.size
        groups = _by_source(source)
        parts = []
        held = 0
        for (s, idx), part in zip(groups, self._read_sources(seed, local, groups), strict=True):
            part = checked_rows(self._who(s), part, idx.size)  # as a Loader checks a source
            # What a Mapped source decoded before its fn (a crop) returned less.
            held += max(nbytes(part), getattr(self.sources[s], "held_bytes", 0))
            # Asked after each read: a source may know its keys only once it has read.
            self._ragged.update(ragged_keys(part), getattr(self.sources[s], "ragged_keys", ()))
            self._check_layout(s, part)
            parts.append((idx, part))
        out = merge_parts(n, parts, self._ragged)
        if n == 0:  # the same keys and per-sample shapes as any batch, with no samples
            with source_lock(self.sources[0]):
                part = self.sources[0].read(source_seed(seed, 0), samples)
            out = {k: v[:0] for k, v in part.items()}
        out["source"] = source.astype(np.int32)
        self.held_bytes = held
        return out

    def _who(self, s: int) -> str:
        return f"source {self.names[s]!r} ({type(self.sources[s]).__name__}) of the mixture"

    def locate(
        self, seed: int, samples: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """``(source id, sample number within that source)`` of each global sample (what
        an exact pass marks). The last answer is kept, so asking about the samples just
        read costs a comparison; the kept tuple is replaced whole, so a caller in
        another thread at worst plans them again."""
        return self._locate(seed, np.asarray(samples, dtype=np.int64))

    def _locate(
        self, seed: int, samples: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """The plan's ``locate``, kept for the last samples: the loader asks for each
        chunk twice, to read ahead and to read."""
        last = self._last
        if last is not None and last[0] == seed and np.array_equal(last[1], samples):
            return last[2], last[3]
        source, local = self.plan.locate(seed, samples)
        self._last = (seed, samples.copy(), source, local)
        return source, local

    def _read_sources(
        self, seed: int, local: NDArray[np.int64], groups: list[tuple[int, NDArray[np.intp]]]
    ) -> list[Batch]:
        """Each source's part of a read, in ``groups``' order: side by side on the
        source pool (on a network mount each source's read is round trips of its
        own; one after another, N sources waited N times as long), or in turn for
        a single source. Every read finishes before the first error (by source
        order) is raised. (A mixture is never a source of another, which holds
        the ``source`` key: no read on the pool waits for the pool.)"""

        def one(s: int, idx: NDArray[np.intp]) -> Batch:
            sub = self.sources[s]
            try:
                with source_lock(sub):
                    return sub.read(source_seed(seed, s), local[idx])
            except Exception as exc:  # a Mapped source's fn names itself, not its place here
                exc.add_note(f"while reading {self._who(s)}")
                raise

        if len(groups) < 2 or not _SIDE_BY_SIDE:
            return [one(s, idx) for s, idx in groups]
        futures = [source_pool().submit(one, s, idx) for s, idx in groups]
        return results(futures, "other source(s) of the mixture failed too")

    def _check_layouts(self, seed: int) -> None:
        """Every source's layout, from an empty read of each (no I/O), before the first
        batch: a source of weight 0.001 would otherwise show a mismatch ~1,000 samples
        in. Sources whose empty read says nothing of their arrays (files: shapes are
        known only once decoded) are checked at their first real read."""
        empty = np.empty(0, dtype=np.int64)
        for s, sub in enumerate(self.sources):
            try:
                with source_lock(sub):
                    part = sub.read(source_seed(seed, s), empty)
            except Exception as exc:
                exc.add_note(f"while reading {self._who(s)} (an empty read, for its layout)")
                raise
            # A file source's empty read gives its index (and with labels=, its label)
            # but not its data: taken for its layout, it refused the source's first real
            # read (a mixture of two labelled FileSources never read a batch).
            if set(part) - {"index", "label"}:
                self._check_layout(s, part)

    def _check_layout(self, s: int, part: Batch) -> None:
        """Every source gives the same keys, dtypes and trailing shapes (checked once each);
        strings of one kind (``U``, ``S``) may differ in width, which reads do by their
        values: :func:`merge_parts` makes a read's as wide as its widest part. A ``source``
        array is refused in every part, before the layout: looked for only in the part that
        set it, it was refused as a key mismatch, or never (a read after the refusal), and
        the member's column was overwritten by the mixture's ids."""
        if "source" in part:
            kind = np.asarray(part["source"]).dtype
            raise DataError(
                f"source {self.names[s]!r} returns a 'source' array, which the mixture adds "
                "(each sample's source id); leave that column out (TableSource(columns=[...]))"
                f" or rename it with Mapped(source, fn) (it gave {kind} values, read by "
                f"{type(self.sources[s]).__name__})"
            )
        if not self._layout:
            self._layout = {k: (v.dtype, v.shape[1:], self.names[s]) for k, v in part.items()}
            return
        raw_got = {k: (v.dtype, v.shape[1:]) for k, v in part.items()}
        raw_want = {k: (d, sh) for k, (d, sh, _) in self._layout.items()}
        got, want = self._comparable(raw_got, part), self._comparable(raw_want, None)
        if not _alike(got, want):
            first = next(iter(self._layout.values()))[2]
            pair = (self.sources[s], self.sources[self.names.index(first)])
            tokens = all(type(src).__name__ == "TokenSource" for src in pair)
            detail = ""
            fix = "map one source's arrays to the other's layout with Mapped(source, fn)"
            if set(got) != set(want):
                what = "keys"
                only = [
                    f"only in {who!r}: {keys}"
                    for who, keys in (
                        (self.names[s], sorted(set(got) - set(want))),
                        (first, sorted(set(want) - set(got))),
                    )
                    if keys
                ]
                detail = f" ({'; '.join(only)})"
                if set(got) ^ set(want) == {"position_ids"} and tokens:
                    fix = (
                        "give every token source positions= ('eos' with eos_id=, 'bos' with "
                        "bos_id=, 'documents' for Megatron .idx files: each as its files mark "
                        "documents, and each adds position_ids), or give it to none"
                    )
                elif set(got) ^ set(want) == {"loss_mask"}:  # a token stream beside rows
                    two = ((self.names[s], raw_got), (first, raw_want))
                    fix = _mask_advice(*sorted(two, key=lambda side: "loss_mask" in side[1]))
            elif any(widened(got[k][0], want[k][0]) is None for k in got):
                what = "dtype"  # uint16 and uint32 token files, say: never widened
                casts = _integer_casts(got, want)
                if casts is not None:
                    sides = ((self.names[s], raw_got, pair[0]), (first, raw_want, pair[1]))
                    fix = _widen_advice(sides, casts, tokens) or fix
                elif tokens:
                    fix = f"write one source's files in the other's dtype, or {fix}"
                if all(type(src).__name__ in _OUT_DTYPE for src in pair):
                    fix = f"give row sources the same dtype= (PaddedRows, PairRows), or {fix}"
                if tokens:
                    fix += "; ids of two tokenizers are two vocabularies, which no dtype makes one"
                text = [k for k in sorted(got) if {got[k][0].kind, want[k][0].kind} == {"S", "U"}]
                if text:
                    # NumPy would decode the bytes as ASCII: at the first that is not, a
                    # batch many steps in would fail.
                    raw, txt = (self.names[s], first)
                    if got[text[0]][0].kind == "U":
                        raw, txt = txt, raw
                    fix = (
                        f"{text[0]!r} is bytes (S) in {raw!r} and text (U) in {txt!r}; make "
                        "it one with Mapped(source, fn): np.char.decode(a, 'utf-8') of the "
                        "bytes, or np.char.encode(a, 'utf-8') of the text"
                    )
            else:
                what = "per-sample shape"
            raise DataError(
                f"mixture sources differ in {what}: {self.names[s]!r} gives "
                f"{_describe(raw_got)} but {first!r} gives {_describe(raw_want)}{detail}; mixed "
                f"sources must return the same keys, dtypes and per-sample shapes: {fix}"
            )

    def _comparable(
        self, layout: dict[str, tuple[np.dtype[Any], tuple[int, ...]]], part: Batch | None
    ) -> dict[str, tuple[np.dtype[Any], tuple[int, ...]]]:
        """``layout`` as sources must agree on it: a ragged key by its samples' number of
        dimensions only (sizes and dtypes may differ, as within one source's batch), its
        ``<key>_shape`` left out (a batch of equal images has none)."""
        out = {}
        for k, (d, sh) in layout.items():
            base = k.removesuffix("_shape")
            if k != base and base in self._ragged:
                continue
            if k in self._ragged:
                ndim = _sample_ndim(k, d, sh, part, self._layout)
                out[k] = (np.dtype(object), (-1,) * ndim)
            else:
                out[k] = (d, sh)
        return out

    def starts(
        self, seed: int, samples: NDArray[np.int64]
    ) -> tuple[NDArray[np.int64], NDArray[np.int64]]:
        """Where each sample lies: (source and its file, offset), what
        ``Loader(host_order="address")`` sorts each step by. Sources come first,
        so each source's samples of a step lie together in that order (a host
        whose share of the step covers part of a source reads that part of
        its windows), and within a source by its own ``starts``."""
        samples = np.asarray(samples, dtype=np.int64)
        source, local = self._locate(seed, samples)
        files = np.empty_like(samples)
        offsets = np.empty_like(samples)
        for s, sub in enumerate(self.sources):
            where = getattr(sub, "starts", None)
            if where is None:
                raise ConfigError(
                    f"host_order='address' needs every mixed source to say where its samples "
                    f"lie (starts(seed, samples)); source {self.names[s]!r} "
                    f"({type(sub).__name__}) does not."
                )
            idx = np.flatnonzero(source == s)
            if not idx.size:
                continue
            with source_lock(sub):
                f, o = where(source_seed(seed, s), local[idx])
            files[idx] = (s << 32) | np.asarray(f, dtype=np.int64)
            offsets[idx] = o
        return files, offsets

    def prefetch(
        self,
        seed: int,
        samples: NDArray[np.int64],
        share: tuple[float, float] | None = None,
        end: int | None = None,
    ) -> None:
        """Tell each source which of its samples come next; with ``share`` (this
        host's fraction of each step in address order), also its share of that
        source's part of the steps, for sources that read ahead by share.

        ``end`` (from a loader whose run has a last step): the first global sample no
        step reads. Each source that takes one is told its own: the first of its samples
        that no step up to the one holding ``end - 1`` draws. Without it a table's last
        window read ahead the next, which no step read (1.13x the table's bytes in a
        bounded epoch of 4 windows)."""
        samples = np.asarray(samples, dtype=np.int64)
        source, local = self._locate(seed, samples)
        parts = self._shares(samples, share) if share is not None and samples.size else {}
        ends = None
        if end is not None and samples.size:
            b = self.batch_size
            ends = self.plan.cumulative(-(-int(end) // b) * b)  # (S,): each source's end
        for s, idx in _by_source(source):
            fn = getattr(self.sources[s], "prefetch", None)
            if fn is None:
                continue
            takes = self._takes.get(s)
            if takes is None:
                takes = self._takes[s] = frozenset(inspect.signature(fn).parameters)
            kw: dict[str, Any] = {}
            if s in parts and "share" in takes:
                kw["share"] = parts[s]
            if ends is not None and "end" in takes:
                kw["end"] = int(ends[s])
            with source_lock(self.sources[s]):
                fn(source_seed(seed, s), local[idx], **kw)

    def followed_by(self, seed: int, samples: NDArray[np.int64]) -> None:
        """Tell each source that asks which of its samples the next read asks for
        (none: a source this next chunk does not draw from is told so)."""
        if not any(hasattr(src, "followed_by") for src in self.sources):
            return  # none asks (token windows, rows, tables): no second locate per chunk
        samples = np.asarray(samples, dtype=np.int64)
        source, local = self._locate(seed, samples)
        for s, src in enumerate(self.sources):
            fn = getattr(src, "followed_by", None)
            if fn is not None:
                with source_lock(src):
                    fn(source_seed(seed, s), local[source == s])

    def _shares(
        self, samples: NDArray[np.int64], share: tuple[float, float]
    ) -> dict[int, tuple[float, float]]:
        """Each source's fraction of its own samples that a host with ``share`` of
        every step (in address order: source by source) takes, over the steps of
        ``samples``: the counts per step vary by one or two, so the union."""
        b = self.batch_size
        lo, hi = round(share[0] * b), round(share[1] * b)
        counts = self.plan.step_counts(np.unique(samples // b))  # (steps, S)
        first = np.cumsum(counts, axis=1) - counts  # where each source starts in a step
        a = np.clip(lo - first, 0, counts)
        z = np.clip(hi - first, 0, counts)
        out = {}
        for s in range(self.plan.sources):
            some = z[:, s] > a[:, s]
            if some.any():
                n = counts[some, s]
                out[s] = (float((a[some, s] / n).min()), float((z[some, s] / n).max()))
        return out

    def close(self) -> None:
        errors: list[BaseException] = []
        for src in self.sources:
            close = getattr(src, "close", None)
            if close is None:
                continue
            try:
                with source_lock(src):  # not under a read of another loader over it
                    close()
            except BaseException as exc:  # close the others first
                errors.append(exc)
        if errors:
            raise errors[0]


def _by_source(source: NDArray[np.int64]) -> list[tuple[int, NDArray[np.intp]]]:
    """Each source met and its positions, ascending: one stable sort, where comparing
    every sample with each source met was O(sources met x samples) a chunk."""
    if not source.size:
        return []
    order = np.argsort(source, kind="stable")
    ids = source[order]
    cuts = np.flatnonzero(ids[1:] != ids[:-1]) + 1
    firsts = np.concatenate(([0], cuts))
    return list(zip(ids[firsts].tolist(), np.split(order, cuts), strict=True))


def _alike(
    got: dict[str, tuple[np.dtype[Any], tuple[int, ...]]],
    want: dict[str, tuple[np.dtype[Any], tuple[int, ...]]],
) -> bool:
    """The same keys and per-sample shapes, and dtypes that differ at most in their
    strings' widths (a source's strings are as wide as the values it read: the read's
    parts are merged as wide as the widest, :func:`merge_parts`)."""
    return got.keys() == want.keys() and all(
        got[k][1] == want[k][1] and widened(got[k][0], want[k][0]) is not None for k in got
    )


def _integer_casts(
    got: dict[str, tuple[np.dtype[Any], tuple[int, ...]]],
    want: dict[str, tuple[np.dtype[Any], tuple[int, ...]]],
) -> dict[str, np.dtype[Any]] | None:
    """The dtype each key of integers that differs between two layouts widens to (uint16
    ids beside int32: int32; y of labels, int64, beside a token file's uint16: int64), or
    ``None`` where another key differs, or two dtypes hold no integer one (uint64, int64)."""
    out = {}
    for k in got:
        a, b = got[k][0], want[k][0]
        if widened(a, b) is not None:
            continue
        wide = np.promote_types(a, b) if a.kind in "iu" and b.kind in "iu" else None
        if wide is None or wide.kind not in "iu":
            return None
        out[k] = wide
    return out


def _widen_advice(
    sides: tuple[tuple[str, dict[str, tuple[np.dtype[Any], tuple[int, ...]]], Any], ...],
    casts: dict[str, np.dtype[Any]],
    tokens: bool,
) -> str:
    """What to pass so two layouts of integers differing in width mix: each source's own
    casts, the keys it holds narrower only (a source widened whole, its y of labels cast
    down to its ids' dtype, was refused again beside the other's until 2026-12-07)."""
    parts = []
    for name, layout, _ in sides:
        mine = {k: d for k, d in casts.items() if layout[k][0] != d}
        if not mine:
            continue
        cast = ", ".join(f"{k!r}: arrays[{k!r}].astype(np.{d.name})" for k, d in mine.items())
        ids = f" (or write its ids as {mine['x'].name})" if tokens and "x" in mine else ""
        parts.append(
            f"widen {name!r} with Mapped(source, fn), fn(arrays, samples) returning "
            f"{{**arrays, {cast}}}{ids}"
        )
    if not parts:
        return ""
    out = "; and ".join(parts) + " (fn defined at module level)"
    if "y" in casts:
        masks = {n: getattr(src, "ignore_index", None) for n, _, src in sides}
        plain = [
            n for n, _, src in sides if type(src).__name__ == "TokenSource" and masks[n] is None
        ]
        marked = [(n, v) for n, v in masks.items() if isinstance(v, int)]
        if plain and marked:
            out += (
                f"; {plain[0]!r} masks no target (its y is the next ids, documents' first "
                "included): TokenSource(..., positions=..., targets='documents', "
                f"ignore_index={marked[0][1]}) masks those that begin a document, as "
                f"{marked[0][0]!r} does"
            )
    return out


def _mask_advice(
    lacking: tuple[str, dict[str, tuple[np.dtype[Any], tuple[int, ...]]]],
    masked: tuple[str, dict[str, tuple[np.dtype[Any], tuple[int, ...]]]],
) -> str:
    """The one fn that gives a source without ``loss_mask`` (a token stream) the layout of
    one with it (padded rows): every target counted, its ids widened where the other's are
    wider. Told only to map one layout to the other, a user met a second refusal (uint16
    ids beside int32) once the mask was added."""
    (name, mine), (_, theirs) = lacking, masked
    casts = _integer_casts(mine, {k: theirs[k] for k in mine}) or {}
    cast = "".join(
        f", {k!r}: arrays[{k!r}].astype(np.{d.name})" for k, d in casts.items() if mine[k][0] != d
    )
    return (
        f"give {name!r} a loss_mask (each of its targets counts) with Mapped(source, fn), "
        f"fn(arrays, samples) returning {{**arrays, 'loss_mask': np.ones(arrays['x'].shape, "
        f"bool){cast}}} (fn defined at module level)"
    )


def _describe(layout: dict[str, tuple[np.dtype[Any], tuple[int, ...]]]) -> str:
    return "{" + ", ".join(f"{k}: {d} {sh}" for k, (d, sh) in sorted(layout.items())) + "}"


def _sample_ndim(
    key: str,
    dtype: np.dtype[Any],
    trailing: tuple[int, ...],
    part: Batch | None,
    first: dict[str, tuple[np.dtype[Any], tuple[int, ...], str]],
) -> int:
    """Dimensions of ``key``'s samples: of a stacked array, its trailing shape's; of a
    ragged one, its ``<key>_shape``'s width (from ``part``, else the first layout seen)."""
    if dtype.kind != "O":
        return len(trailing)
    if part is not None and f"{key}_shape" in part:
        return int(part[f"{key}_shape"].shape[1])
    shape = first.get(f"{key}_shape")
    return int(shape[1][0]) if shape is not None else 0
