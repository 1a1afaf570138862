"""What reading zstd-compressed MDS shards costs ``MDSSource``, against the same dataset
uncompressed: 40,000 samples (``tokens``: 200-800 uint16 ids drawn Zipf-like, ``id``:
``int``) in shards of 200 (200 shards, about 200 KB each decompressed), local files in
the page cache, B=256, sync loader (``prefetch=0``), A/B/A/B in one process, medians.

Sides (the two "window" sides read the same batches, so do the two "full" ones):
  zstd window   compressed, shuffle="window", window_rows=8,000 (40 shards a window)
  raw window    uncompressed, the same windows
  raw full      uncompressed, shuffle="full"
  zstd full     compressed, shuffle="full", shard_cache_bytes of 4 shards: the thrash

Prediction (before the first run): a window decompresses each shard once an epoch
(~50 MB of zstd at ~1 GB/s: ~0.05 s an epoch of 156 batches) and then slices memory
instead of 256 preads a batch, so zstd window runs at 0.8-1.3x raw window's
batches/s, reading the compressed bytes once (about 0.6x the raw). raw window and raw
full are within 1.3x of each other (the page cache serves both). The full shuffle over
compressed shards with a cache of 4 shards decompresses most of the 20 shards every
batch: about 60-100 KB decompressed a sample of ~1 KB, 10-30x fewer batches/s than raw
full.

That first run had 20 shards of 2,000: the loader reads up to 1,024 samples at once
(4 batches), so a read decompressed the 20 shards once for 1,024 samples (7.5 KB a
sample, 1.9x). A dataset of many shards is what a full shuffle meets: revised to 200
shards of 200 before the second run, predicted: a read of 1,024 samples touches ~200
shards, ~40 KB decompressed a sample, 5-20x fewer batches/s than raw full; the other
sides as above. Measured 8.7 KB a sample: the loader's reads grow to 8,192 samples
(read-ahead), so each read decompressed the 200 shards once (200 x 204 KB / 8,192).
Such a read then held every shard it touched; since then a read takes compressed shards
in groups that fit the cache. Third run: the same figures predicted, 5 trials (the
second's trials spread 2-3x: other jobs on the machine).

Run: PYTHONPATH=src python benchmarks/mds_zstd.py [--trials 5] [--steps 156]
(156 steps: an epoch, so each window side decompresses or reads every shard once).

``--ahead``: the read-ahead of the next window's shards, on against off (a subclass
without ``prefetch``), A/B/A/B, medians. 65,536 samples of 1,000-3,000 uint16 ids
(~4 KB) in zstd shards of 512 (~2 MiB decompressed), windows of 16 shards (~32 MiB):
8 windows, 2,048 steps of B=32 an epoch; the default loader (prefetch=8, a producer
thread, chunks of up to 32 steps) and a consumer that sleeps ``--step-ms`` a batch
for a training step. Measured: the consumer's wait for each batch, at the 7 steps
that start a window and elsewhere (the first batch excluded: both sides load the
first window then), and batches/s. ``--s3``: the shards served by a local S3
endpoint (benchmarks/_files_s3.py) behind a ``LatencyProxy`` of ``--latency-ms``
(20) and ``--mbps`` (400).

Prediction (before the first run), local (page cache), steps of 2 ms: off, each
window switch after the first waits for a window's 16 shards read and decompressed
(~32 MiB at ~1 GB/s zstd on the I/O pool's 2 cores: 20-60 ms) less the 8 ready
batches (16 ms): max wait 10-50 ms, total 0.1-0.3 s an epoch; on: max wait under
5 ms; batches/s 1.0-1.1x off. Measured (3 trials, load average ~7 on 2 cores):
off waited at most 4.7 ms in two trials: a chunk of 32 steps (64 ms of steps) is
read while the one before is consumed, which covers a window's load; the max wait
of either side was the machine's noise (115-170 ms in some trials of both). Revised
before the second run: steps of 1 ms (a chunk covers 32 ms), and the waits at the
window switches reported apart from the others, pooled over the trials. Predicted:
off, a median switch wait of 20-70 ms; on, a median switch wait like the other
waits' (under 2 ms); batches/s 1.0-1.05x. S3 (20 ms, 400 MB/s): off, a window's
~18 MB at 400 MB/s and a round trip, 40-100 ms less a chunk's 32 ms; on, under
5 ms; batches/s 1.02-1.1x. Measured: no stall on either side (all switch waits
0 ms, on 596.9 against off 611.6 batches/s, 0.98x): a window of 32 MiB loads within a
chunk's 32 ms here, which the loader's own read-ahead of chunks covers. Revised
before the third run: windows of 32 shards (64 MiB, 4 windows) and a cache of two
windows (so a second epoch decompresses again), two epochs (4,096 steps). Predicted:
off, switch waits of 30-150 ms; on, under 5 ms. Measured (3 trials): off waited
178-653 ms at most (total 0.23-1.03 s), on 48-76 ms (total 0.08-0.19 s); but the
waits did not fall on the steps taken for switches, which start a window: the loader
reads a chunk of up to 32 steps at once, so the wait falls on the first step of the
chunk that reaches into the new window. Revised before the fourth run: a switch's
stall is the longest wait of the 33 steps up to it. Predicted: off, a median switch
stall of 100-300 ms; on, under 30 ms; total wait 2-6x less on; batches/s 0.95-1.1x
(the trials' spread on this shared machine is larger than the waits).

Fourth run, local (5 trials, 2c, 2026-12-04): no stall on either side: a median switch
stall of 0.0 ms both, total wait 0.054 s on against 0.041 s off, 603.9 against 627.8
batches/s (0.96x, within the trials' spread of 544-723), the same digest
``00493b2a0c92``. The loader reads up to two chunks (2 x 32 steps) ahead of the
consumer, and a 64 MiB window from the page cache loads within them: locally the
read-ahead pays only where a window takes longer to load than 64 steps take to
consume (1 GiB windows, the default, and steps under ~10 ms). ``--s3 --mbps 100``
(20 ms a request, 100 MB/s; 3 trials, same day), predicted as S3 above but at 100
MB/s: off, a window's ~35 MB in 350 ms less 64 ms, 200-350 ms a switch; on, under
5 ms; batches/s 1.05-1.2x. Measured: off stalled 329-532 ms at 6 of the 7 switches
(median 380 ms; the seventh's window was held from the epoch before), on 0.0 ms at
every switch; total wait 2.480 s against 0.237 s (10.5x, the rest the first
window's, on both); 523.4 against 451.7 batches/s (1.16x); the same digest
``00493b2a0c92``.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
from _out import out
from _timed import seconds_per_step

from headrace.formats import MDSSource
from headrace.pipeline import Loader
from headrace.testing import batch_digest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from _mds_files import write_mds  # the tests' writer of Streaming's format

SAMPLES, PER_SHARD, BATCH, WINDOW = 40_000, 200, 256, 8_000
SIDES = ("zstd window", "raw window", "raw full", "zstd full")


def source(roots: dict[str, Path], side: str) -> MDSSource:
    codec, shuffle = side.split()
    kw: dict[str, Any] = {"shuffle": shuffle, "window_rows": WINDOW}
    if side == "zstd full":
        # Four shards' worth: the warning says it thrashes, which is what is measured.
        kw["shard_cache_bytes"] = 4 * (roots["raw"] / "shard.00000.mds").stat().st_size
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return MDSSource(roots[codec], **kw)


class NoReadAhead(MDSSource):
    """The source with no ``prefetch``: the loader reads nothing ahead of it."""

    prefetch = None  # type: ignore[assignment]


AHEAD_SAMPLES, AHEAD_PER_SHARD, AHEAD_WINDOW, AHEAD_BATCH = 65_536, 512, 16_384, 32


def waits(src: MDSSource, steps: int, step_ms: float) -> tuple[list[float], float, str]:
    """Each batch's wait in seconds (the first batch's excluded), batches/s after the
    first, and the digest of every batch; the consumer sleeps ``step_ms`` a batch."""
    waited: list[float] = []
    began: list[float] = []

    def consumed(ld: Loader) -> Iterator[dict[str, Any]]:
        it = iter(ld)
        while True:
            t = time.perf_counter()
            batch = next(it, None)
            if batch is None:
                return
            if began:
                waited.append(time.perf_counter() - t)
            else:
                began.append(time.perf_counter())
            yield batch
            time.sleep(step_ms / 1e3)

    with Loader(src, batch_size=AHEAD_BATCH, seed=3, steps=steps) as ld:
        digest = batch_digest(consumed(ld))
    return waited, (steps - 1) / (time.perf_counter() - began[0]), digest


@contextlib.contextmanager
def ahead_root(local: Path, s3: bool, latency_ms: float, mbps: float) -> Iterator[tuple[str, Any]]:
    """The dataset's root (local, or s3:// behind a LatencyProxy) and store_options."""
    if not s3:
        yield str(local), None
        return
    from _files_s3 import files_s3, store_options

    from headrace.emulate import LatencyProxy

    with (
        files_s3(str(local.parent)) as endpoint,
        LatencyProxy(endpoint, latency_ms=latency_ms, mbps=mbps) as proxy,
    ):
        yield f"s3://bench/{local.name}", store_options(proxy.endpoint)


def ahead_main(args: argparse.Namespace) -> None:
    rng = np.random.default_rng(1)
    lengths = rng.integers(1_000, 3_001, AHEAD_SAMPLES)
    ids = np.minimum(rng.zipf(1.3, int(lengths.sum())), 50_000).astype(np.uint16)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    samples = [{"tokens": ids[starts[k] : starts[k + 1]]} for k in range(AHEAD_SAMPLES)]
    steps = args.steps or 2 * AHEAD_SAMPLES // AHEAD_BATCH  # two epochs
    sides = ("ahead on", "ahead off")
    with tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "zstd"
        write_mds(local, {"tokens": "ndarray:uint16"}, samples, per_shard=AHEAD_PER_SHARD,
                  compression="zstd")  # fmt: skip
        stored = sum(p.stat().st_size for p in local.glob("shard.*"))
        with ahead_root(local, args.s3, args.latency_ms, args.mbps) as (root, options):
            kw: dict[str, Any] = {"window_rows": AHEAD_WINDOW, "store_options": options}
            with MDSSource(root, **kw) as probe:
                raw = sum(s.raw_bytes or 0 for s in probe.index.shards)
                assert probe.windows is not None
                w = probe.windows
                sizes = sorted(
                    sum(probe._raw[s] for s in w.groups(k)) for k in range(w.num_windows)
                )
                # Two windows: the current and the next, not the dataset (held, a second
                # epoch would read nothing).
                kw["shard_cache_bytes"] = sizes[-1] + sizes[-2]
                out(f"{'s3 behind the proxy' if args.s3 else 'local'}: {len(samples):,} "
                    f"samples, {len(probe.index.shards)} shards, {stored:,} bytes stored, "
                    f"{raw:,} decompressed, {probe.windows.num_windows} windows; "
                    f"{steps} steps of B={AHEAD_BATCH}, step {args.step_ms} ms")  # fmt: skip
                # The steps that start a window (the first step excluded, as its wait).
                last = np.arange(steps, dtype=np.int64) * AHEAD_BATCH + AHEAD_BATCH - 1
                win = probe.windows.layout.window_of(3, last)
                switch = np.flatnonzero(win[1:] != win[:-1])  # index into the waits
            pooled: dict[str, list[float]] = {s: [] for s in sides}  # waits at switches
            others: dict[str, list[float]] = {s: [] for s in sides}
            rates: dict[str, list[float]] = {s: [] for s in sides}
            totals: dict[str, list[float]] = {s: [] for s in sides}
            digests: dict[str, set[str]] = {s: set() for s in sides}
            for _ in range(args.trials):
                for side in sides:
                    src = (MDSSource if side == "ahead on" else NoReadAhead)(root, **kw)
                    w, rate, d = waits(src, steps, args.step_ms)
                    # A switch's stall: the longest wait of the chunk (up to 32 steps)
                    # that reached into the new window, read while the consumer waited.
                    spans = [np.arange(max(0, k - 32), k + 1) for k in switch.tolist()]
                    at = np.array([max(np.asarray(w)[sp]) for sp in spans])
                    rest = np.delete(np.asarray(w), np.concatenate(spans))
                    pooled[side] += at.tolist()
                    others[side] += rest.tolist()
                    rates[side].append(rate)
                    totals[side].append(sum(w))
                    digests[side].add(d)
                    out(f"  {side}: stalls at the {len(switch)} window switches "
                        f"{' '.join(f'{x * 1e3:.0f}' for x in at)} ms, elsewhere max "
                        f"{max(rest) * 1e3:.0f} ms; total "
                        f"{sum(w):.3f} s, {rate:.1f} batches/s, shards read ahead "
                        f"{src.stats.ahead}, decompressed {src.stats.unzipped}")  # fmt: skip
        out("side        switch stall ms: median  p90   max | other waits p99 ms | "
            "total wait s median | batches/s median | digest")  # fmt: skip
        med = {}
        for side in sides:
            q = np.percentile(pooled[side], [50, 90, 100]) * 1e3
            med[side] = (q[0], statistics.median(totals[side]), statistics.median(rates[side]))
            digest = ",".join(sorted(d[:12] for d in digests[side]))
            out(f"{side:<11} {q[0]:>21.1f} {q[1]:>5.1f} {q[2]:>5.1f} | "
                f"{np.percentile(others[side], 99) * 1e3:>18.1f} | {med[side][1]:>19.3f} | "
                f"{med[side][2]:>16.1f} | {digest}")  # fmt: skip
        on, off = med["ahead on"], med["ahead off"]
        out(
            f"median switch stall off {off[0]:.1f} ms, on {on[0]:.1f} ms; total wait off / "
            f"on {off[1] / max(on[1], 1e-6):.1f}x; batches/s on / off {on[2] / off[2]:.3f}x"
        )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--ahead", action="store_true", help="read-ahead on against off")
    ap.add_argument("--s3", action="store_true", help="--ahead from S3 behind a proxy")
    ap.add_argument("--step-ms", type=float, default=1.0)
    ap.add_argument("--latency-ms", type=float, default=20.0)
    ap.add_argument("--mbps", type=float, default=400.0)
    args = ap.parse_args()
    if args.ahead:
        ahead_main(args)
        return
    args.steps = args.steps or 156
    rng = np.random.default_rng(0)
    ids = np.minimum(rng.zipf(1.3, SAMPLES * 800), 50_000).astype(np.uint16)
    lengths = rng.integers(200, 801, SAMPLES)
    starts = np.concatenate([[0], np.cumsum(lengths)])
    samples = [{"tokens": ids[starts[k] : starts[k + 1]], "id": k} for k in range(SAMPLES)]
    with tempfile.TemporaryDirectory() as tmp:
        roots = {"raw": Path(tmp) / "raw", "zstd": Path(tmp) / "zstd"}
        columns = {"tokens": "ndarray:uint16", "id": "int"}
        write_mds(roots["raw"], columns, samples, per_shard=PER_SHARD)
        write_mds(roots["zstd"], columns, samples, per_shard=PER_SHARD, compression="zstd")
        sizes = {k: sum(p.stat().st_size for p in r.glob("shard.*")) for k, r in roots.items()}
        out(f"shards: raw {sizes['raw']:,} bytes, zstd {sizes['zstd']:,} bytes")
        for side in SIDES:
            seconds_per_step(source(roots, side), 5, batch_size=BATCH)  # page cache warm
        times: dict[str, list[float]] = {s: [] for s in SIDES}
        digests: dict[str, set[str]] = {s: set() for s in SIDES}
        read: dict[str, float] = {}
        unzipped: dict[str, float] = {}
        for _ in range(args.trials):
            for side in SIDES:
                src = source(roots, side)
                s, d = seconds_per_step(src, args.steps, batch_size=BATCH)
                times[side].append(1 / s)
                digests[side].add(d)
                st, n = src.stats, args.steps * BATCH
                read[side] = (st.zip_bytes if side.startswith("zstd") else st.bytes) / n
                unzipped[side] = st.unzipped_bytes / n
        out("side          median batches/s   per trial         read B/sample  "
            "decompressed B/sample  digest")  # fmt: skip
        for side in SIDES:
            shown = " ".join(f"{t:.1f}" for t in times[side])
            out(
                f"{side:<13} {statistics.median(times[side]):>16.1f}   {shown:<16}  "
                f"{read[side]:>13,.0f}  {unzipped[side]:>21,.0f}  "
                f"{','.join(sorted(d[:12] for d in digests[side]))}"
            )
        med = {s: statistics.median(times[s]) for s in SIDES}
        out(
            f"ratios: zstd window / raw window {med['zstd window'] / med['raw window']:.2f}x, "
            f"raw window / raw full {med['raw window'] / med['raw full']:.2f}x, "
            f"raw full / zstd full {med['raw full'] / med['zstd full']:.1f}x"
        )


if __name__ == "__main__":
    main()
