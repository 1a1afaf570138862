"""Token workloads: random context windows of flat (or Megatron) token files.

Variants, all on the same plan (``TokenSource.starts``), so their digests agree:

``naive``           nanoGPT's loader: ``np.memmap`` recreated per batch, one slice
                    per sample, ``np.stack`` for ``x`` and again for ``y``.
``headrace-sync``   :class:`~headrace.pipeline.Loader` with ``prefetch=0``.
``headrace-async``  the same with a read-ahead thread (``prefetch`` batches).
``memcpy``          the floor of any gather: ``np.copyto`` of the ``B x (L+1)``
                    tokens a single-copy gather moves, into a fresh array, from a
                    rotating offset of the warm, pre-faulted file map. Not digested.

With ``storage = "s3"`` (``--storage s3``) the headrace variants read the token
file from an S3 endpoint served for the run (:mod:`headrace.bench._storage`):
blocks by ranged GETs, windows read ahead. ``naive`` and ``memcpy`` read the
local file only (``LOCAL_ONLY``): the CLI leaves them out of such a run.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from numpy.typing import NDArray

from headrace.bench._datagen import token_bytes_to_write, write_token_file
from headrace.bench._kind import (
    TOKENS_DELIVERED,
    Batch,
    GenStream,
    Kind,
    Stream,
    VariantSpec,
    filled,
    store_figures,
    variant,
)
from headrace.bench._storage import Storage
from headrace.bench._workload import refuse
from headrace.errors import ConfigError, DataError
from headrace.formats import (
    TOKEN_DTYPES,
    TokenSource,
    read_megatron_index,
    write_megatron_index,
    write_token_sidecar,
)
from headrace.pipeline import Loader
from headrace.plan import host_slice, step_samples

__all__ = ["LOCAL_ONLY", "MegatronKind", "TokenKind", "covered_tokens"]

#: Variants that read the local file whatever the storage.
LOCAL_ONLY = ("naive", "memcpy")

MiB = 1 << 20
GiB = 1 << 30
PAGE = 4096


def covered_tokens(starts: NDArray[np.int64], length: int) -> int:
    """Tokens that the runs ``[s, s + length)`` cover together, each counted once."""
    offs = np.sort(starts)
    reach = np.maximum.accumulate(offs + length)
    gaps = np.maximum(0, offs[1:] - reach[:-1])
    return int(reach[-1]) - int(offs[0]) - int(gaps.sum())


class TokenPayload(Kind):
    """Payload of ``L + 1``-token samples (``x`` and ``y`` share a row): for kinds whose
    ``plan_chunks`` yields each step's samples' first tokens in one token space."""

    context: int
    dtype: np.dtype[Any]

    def read_settings(self, workload: Any) -> None:
        """The TokenSource's window and block sizes, read-ahead depth, and this host's
        slice of each batch, from the workload (``context`` and ``dtype`` set first).

        The sizes are checked here, as TokenSource would check them: its refusals came
        after the dataset was generated, and named its own arguments (``block_mib = 0``
        said "block_bytes must be a multiple of 4096 (got 0)")."""
        rd, t = workload.reader, workload.train
        window = float(rd.get("window_mib", 256))
        block = float(rd.get("block_mib", 4))
        if not (block > 0 and block * MiB % PAGE == 0):
            raise ConfigError(
                f"{rd.where}: block_mib must be a whole number of 4 KiB pages, > 0 (a "
                f"multiple of 1/256 MiB, e.g. 4, 0.25 or 0.00390625); got {block:g}"
            )
        if not window > 0:
            raise ConfigError(f"{rd.where}: window_mib must be > 0; got {window:g}")
        self.window_bytes = int(window * MiB)
        self.block_bytes = int(block * MiB)
        least = (self.context + 1) * self.dtype.itemsize
        if self.window_bytes < least:
            raise ConfigError(
                f"{rd.where}: window_mib = {window:g} cannot hold one sample: context + 1 = "
                f"{self.context + 1} {self.dtype.name} tokens take {least} bytes; give "
                f"window_mib >= {math.ceil(least / MiB * 1e4) / 1e4:g}"
            )
        self.prefetch = rd.count("prefetch", 8, least=0)
        self.lo, self.hi = host_slice(t.batch_size, t.rank, t.world_size)

    def plan_chunks(self, seed: int, steps: int) -> Iterator[NDArray[np.int64]]:
        raise NotImplementedError

    def record_bytes(self) -> float:
        # x and y share one (L + 1)-token row: counted once.
        return float((self.context + 1) * self.dtype.itemsize)

    def payload_counts(self) -> str:
        return TOKENS_DELIVERED

    def batch_payload_bytes(self, batch: Batch) -> int | None:
        x = batch["x"]  # x and y: the same samples' L + 1 tokens, shifted by one
        return int(x.shape[0] * (x.shape[1] + 1) * x.itemsize)

    def unique_payload_bytes(self, steps: int) -> int:
        # Neighbouring samples share a token (x's last is the next sample's first)
        # and epochs repeat samples: count each delivered byte once.
        offs = np.concatenate(list(self.plan_chunks(self.workload.train.seed, steps)))
        return covered_tokens(offs, self.context + 1) * int(self.dtype.itemsize)


class TokenKind(TokenPayload):
    """One flat token file of ``token_file_gib`` GiB; samples of ``context`` tokens."""

    cached_variants = frozenset({"headrace-cached"})

    def __init__(self, workload: Any, root: str) -> None:
        super().__init__(workload, root)
        ds, rd = workload.dataset, workload.reader
        refuse(
            ds,
            "format",
            "the kind is the layout: kind = 'tokens' reads one flat token file, kind = "
            "'megatron' a Megatron .bin/.idx pair; dtype sets the token type",
        )
        refuse(
            rd,
            "style",
            "it reads one way, windows filled block by block on demand: window_mib and "
            "block_mib size them",
        )
        refuse(
            rd,
            "odirect",
            "its windows are filled through the page cache (a memory map, or pread with the "
            "variant option ?reads=pread); O_DIRECT reads are in the files kind (odirect = true) "
            "and the rows kind (strategy = 'odirect')",
        )
        refuse(
            rd,
            "strategy",
            "a variant option chooses how windows are filled: ?reads=populate (memory map, the "
            "default) or ?reads=pread",
        )
        given = ds.get("dtype", "uint32")
        self.dtype = np.dtype(given)
        if self.dtype not in TOKEN_DTYPES:
            # float32 ended in a traceback from the generator; int8 and uint64 were
            # refused by the reader, once the whole token file had been written.
            raise ConfigError(
                f"{ds.where}: dtype = {given!r} is not a token type the reader "
                f"takes: give {', '.join(repr(d.name) for d in TOKEN_DTYPES[:-1])} or "
                f"{TOKEN_DTYPES[-1].name!r}"
            )
        # A whole number: int() read 10.5 as 10; 0 was refused by the reader, after the
        # token file was written.
        self.context: int = ds.count("context", 1024, least=1)
        gib = float(ds.get("token_file_gib", 1.0))
        if not (gib > 0 and math.isfinite(gib)):  # inf: int()'s OverflowError below
            raise ConfigError(
                f"{ds.where}: token_file_gib must be a finite number > 0; got {gib:g}"
            )
        self.num_tokens = int(gib * GiB) // self.dtype.itemsize
        least = 2 * (self.context + 1)  # two samples of context + 1 tokens
        if self.num_tokens < least:
            # It named neither the setting nor the size that would do.
            need = math.ceil(least * self.dtype.itemsize / GiB * 1e6) / 1e6
            raise ConfigError(
                f"{ds.named('token_file_gib', gib)}: a token file of {self.num_tokens} "
                f"tokens is too small for context {self.context} (two samples of "
                f"context + 1 tokens): give {ds.flags.get('token_file_gib') or 'token_file_gib ='} "
                f"{need:g} or more"
            )
        self.read_settings(workload)
        self.store: Storage = Storage(workload, "tokens", caches=True)
        self.check_cache_storage()

    def _local_only(self, spec: VariantSpec) -> None:
        if self.store.remote:
            raise ConfigError(
                f"variant {spec.text!r} reads the local token file, not {self.store.url}; with "
                f"storage 's3' run the headrace variants (--variants headrace-sync,headrace-async)"
            )

    @property
    def path(self) -> str:
        gib = self.num_tokens * self.dtype.itemsize / GiB
        seed = self.workload.train.seed
        return os.path.join(self.root, f"tokens-{gib:g}gib-{self.dtype.name}-s{seed}.bin")

    def generate(self, progress: Callable[[int, int], None] | None = None) -> None:
        write_token_file(
            self.path,
            self.num_tokens,
            dtype=self.dtype.name,
            seed=self.workload.train.seed,
            progress=progress,
        )
        # So that TokenSource(path) opens it as it is, no dtype= needed (a uint32 file
        # without one is refused, asking for it), and a copy cut short is refused. The
        # name gives the size to 6 digits: one rewritten with more tokens kept the
        # sidecar of the first, which refused it.
        meta = {"dtype": self.dtype.name, "tokens": self.num_tokens}
        try:
            with open(self.path + ".json") as f:
                current = json.load(f) == meta
        except (OSError, ValueError):
            current = False
        if not current:
            try:
                write_token_sidecar(self.path, self.dtype, tokens=self.num_tokens)
            except OSError:  # a read-only root (a dataset written before sidecars): the
                pass  # bench gives the dtype itself

    def files(self) -> list[str]:
        return [self.path]

    def dataset_files(self) -> list[str]:
        return [self.path, self.path + ".json"]

    def bytes_to_write(self) -> int:
        return token_bytes_to_write(
            self.path, self.num_tokens, dtype=self.dtype.name, seed=self.workload.train.seed
        )

    def result_extras(self, spec: str) -> dict[str, Any]:
        extras = super().result_extras(spec)
        vs = VariantSpec.parse(spec)
        if vs.name.startswith("headrace"):
            block = int(float(vs.options.get("block_mib", self.block_bytes / MiB)) * MiB)
            extras["first_batch_block_bytes"] = self.first_batch_block_bytes(
                self.seed_of(vs), block
            )
        return extras

    def first_batch_block_bytes(self, seed: int, block_bytes: int) -> int:
        """Bytes of the window blocks that step 0's samples and their labels touch.

        What a lazily filled window has to read before the first batch: the
        issue's bound is twice this, not the window. Worked out from the plan's
        (window, start) of each sample, not from the source's own block bookkeeping.
        """
        t = self.workload.train
        plan = self.source(served=False).layout.locate(
            seed, step_samples(np.zeros(1, dtype=np.int64), t.batch_size, self.lo, self.hi)
        )
        isz = self.dtype.itemsize
        first = plan.start * isz // block_bytes
        last = ((plan.start + self.context + 1) * isz - 1) // block_bytes
        touched = {
            (int(w), b)
            for w, f, e in zip(plan.window, first, last, strict=True)
            for b in range(int(f), int(e) + 1)
        }
        return len(touched) * block_bytes

    def source(self, **kw: Any) -> TokenSource:
        """The headrace source, over the local file or the served object (storage "s3")."""
        where = self.path
        served = kw.pop("served", True)
        if self.store.remote and served:
            where = f"{self.store.url}/{os.path.basename(self.path)}"
            kw["store_options"] = self.store.store_options()
        return TokenSource(
            where,
            dtype=self.dtype,
            context=self.context,
            window_bytes=self.window_bytes,
            block_bytes=self.block_bytes,
            **kw,
        )

    def fill_cache(self, directory: str) -> dict[str, Any]:
        """One epoch of the served file through a source with ``cache_dir``: every block
        of every window, as the cached variant's windows will ask for them."""
        src = self.source(cache_dir=directory)
        try:
            b = self.workload.train.batch_size
            with Loader(src, batch_size=b, steps=-(-src.samples_per_epoch // b)) as loader:
                for _ in loader:
                    pass
            return filled(src.cache_stats)
        finally:
            src.close()

    def plan_chunks(self, seed: int, steps: int, chunk: int = 8) -> Iterator[NDArray[np.int64]]:
        """Per step, the token offset of each of this host's samples (same plan as headrace).

        Planned ``chunk`` steps per vectorised call, as the loader plans them.
        """
        src = self.source(served=False)  # the plan only: the local file's is the same
        b = self.hi - self.lo
        for t0 in range(0, steps, chunk):
            ts = np.arange(t0, min(steps, t0 + chunk))
            files, offs = src.starts(
                seed, step_samples(ts, self.workload.train.batch_size, self.lo, self.hi)
            )
            if files.any():
                raise ConfigError("the naive baseline reads a single token file")
            for i in range(len(ts)):
                yield offs[i * b : (i + 1) * b]


@variant(TokenKind, "naive")
def _naive(k: TokenKind, spec: VariantSpec, steps: int) -> Stream:
    k._local_only(spec)
    L, path, dtype = k.context, k.path, k.dtype
    touched = [0]

    def batches() -> Iterator[Batch]:
        for ix in k.plan_chunks(k.seed_of(spec), steps):
            # nanoGPT recreates the memmap every batch "to avoid a memory leak".
            data = np.memmap(path, dtype=dtype, mode="r")
            x = np.stack([data[i : i + L] for i in ix.tolist()])
            y = np.stack([data[i + 1 : i + 1 + L] for i in ix.tolist()])
            # Bytes read = the 4 KiB pages its slices fault in (the kernel may read ahead more).
            first = ix * dtype.itemsize // PAGE
            last = ((ix + L + 1) * dtype.itemsize - 1) // PAGE
            touched[0] += int((last - first + 1).sum()) * PAGE
            yield {"x": x, "y": y}

    return GenStream(batches(), lambda: touched[0])


def _reads(spec: VariantSpec) -> str:
    """``?reads=``: how a local window is filled (the memory map's ``populate``, or ``pread``)."""
    reads = str(spec.options.get("reads", "populate"))
    if reads not in ("populate", "pread"):
        raise ConfigError(
            f"variant {spec.text!r}: reads must be 'populate' or 'pread' (got {reads!r})"
        )
    return reads


def _chunk_steps(spec: VariantSpec) -> dict[str, int]:
    """``?chunk_steps=``: steps the Loader plans at once (``{}``: the Loader's default, as
    users get it)."""
    if "chunk_steps" not in spec.options:
        return {}
    n = spec.int("chunk_steps", 0)
    if n < 1:
        raise ConfigError(f"variant {spec.text!r}: chunk_steps must be >= 1 (got {n})")
    return {"chunk_steps": n}


#: The options of the Loader variants besides the [reader] keys (see :func:`variant`).
_LOADER_OPTIONS = {"reads": _reads, "chunk_steps": _chunk_steps}


def _loader_stream(k: TokenKind, spec: VariantSpec, steps: int, prefetch: int) -> Stream:
    reads = _reads(spec)
    src = k.source() if k.store.remote else k.source(reads=reads)
    loader = k.loader(src, spec, steps, prefetch=prefetch, **_chunk_steps(spec))
    return GenStream(
        iter(loader),
        lambda: src.stats.bytes_read,
        loader.close,
        lambda: store_figures(src.object_stats),
    )


@variant(TokenKind, "headrace-sync", options=_LOADER_OPTIONS)
def _headrace_sync(k: TokenKind, spec: VariantSpec, steps: int) -> Stream:
    return _loader_stream(k, spec, steps, 0)


@variant(TokenKind, "headrace-async", options=_LOADER_OPTIONS)
def _headrace_async(k: TokenKind, spec: VariantSpec, steps: int) -> Stream:
    return _loader_stream(k, spec, steps, spec.int("prefetch", k.prefetch))


@variant(TokenKind, "headrace-cached")
def _headrace_cached(k: TokenKind, spec: VariantSpec, steps: int) -> Stream:
    """headrace-async over the served file with the run's object cache (filled before
    the run): each block from local disk, as in every epoch after the first."""
    src = k.source(cache_dir=k.store.run_cache_dir(spec.text))
    loader = k.loader(src, spec, steps, prefetch=spec.int("prefetch", k.prefetch))

    def stats() -> dict[str, Any]:
        assert src.cache_stats is not None
        return {"cache": src.cache_stats.to_dict(), **store_figures(src.object_stats)}

    return GenStream(iter(loader), lambda: src.stats.bytes_read, loader.close, stats)


@variant(TokenKind, "memcpy", digest=False, memory=True)
def _memcpy(k: TokenKind, spec: VariantSpec, steps: int) -> Stream:
    k._local_only(spec)
    b, row = k.hi - k.lo, k.context + 1
    n = b * row
    data = np.memmap(k.path, dtype=k.dtype, mode="r")
    # Rotate within one window's worth of the file, faulted in up front, so the
    # figure is a copy from warm memory, not page faults.
    region = data[: max(n, min(data.size, k.window_bytes // k.dtype.itemsize))]
    if region.size < n:  # a batch larger than the file: its tokens repeated, in memory
        region = np.resize(np.asarray(data), n)
    int(region[:: PAGE // k.dtype.itemsize].sum())
    span = region.size - n + 1
    read = [0]

    def batches() -> Iterator[Batch]:
        for i in range(steps):
            off = (i * n) % span
            out = np.empty((b, row), dtype=k.dtype)
            np.copyto(out, region[off : off + n].reshape(b, row))
            read[0] += n * k.dtype.itemsize
            yield {"x": out[:, :-1], "y": out[:, 1:]}

    return GenStream(batches(), lambda: read[0])


class MegatronKind(TokenKind):
    """A Megatron-LM ``.bin``/``.idx`` pair: the same tokens, documents in the index."""

    def __init__(self, workload: Any, root: str) -> None:
        super().__init__(workload, root)
        # A whole number (int() read 2.5 as 2).
        self.document_tokens: int = workload.dataset.count("document_tokens", 4096, least=1)

    @property
    def path(self) -> str:
        return super().path.replace("tokens-", "megatron-")

    def generate(self, progress: Callable[[int, int], None] | None = None) -> None:
        wrote = write_token_file(
            self.path,
            self.num_tokens,
            dtype=self.dtype.name,
            seed=self.workload.train.seed,
            progress=progress,
        )
        idx = self.path[:-4] + ".idx"
        if wrote or not self._index_current():
            write_megatron_index(idx, self.dtype, self._lengths())

    def _lengths(self) -> NDArray[np.int32]:
        """The documents' lengths: ``document_tokens`` each, the last the rest."""
        doc = self.document_tokens
        lengths = np.full(self.num_tokens // doc, doc, dtype=np.int32)
        if self.num_tokens % doc:
            lengths = np.append(lengths, self.num_tokens % doc).astype(np.int32)
        return lengths

    def _index_current(self) -> bool:
        """The ``.idx`` there holds this workload's documents. Its name says the tokens
        only: one written with another ``document_tokens`` was kept (and measured)."""
        try:
            index = read_megatron_index(self.path[:-4] + ".idx", os.path.getsize(self.path))
        except (OSError, DataError):
            return False
        return index.dtype == self.dtype and np.array_equal(index.sequence_lengths, self._lengths())

    def files(self) -> list[str]:
        return [self.path, self.path[:-4] + ".idx"]

    def dataset_files(self) -> list[str]:
        return self.files()  # the index says the dtype: no sidecar

    def bytes_to_write(self) -> int:
        tokens = super().bytes_to_write()
        if not tokens and self._index_current():
            return 0
        docs = -(-self.num_tokens // self.document_tokens)
        # header (magic, version, dtype, counts), then lengths, pointers and document indices
        return tokens + 34 + docs * (4 + 8) + (docs + 1) * 8

    def dataset_bytes(self) -> int:
        return int(self.num_tokens * self.dtype.itemsize)


# The Megatron kind reads through the same variants.
MegatronKind.openers.update(TokenKind.openers)
MegatronKind.variant_options.update(TokenKind.variant_options)
MegatronKind.undigested = TokenKind.undigested
MegatronKind.from_memory = TokenKind.from_memory
