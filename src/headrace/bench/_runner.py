"""Run one workload: a measurement pass per variant, then alternating timed trials.

1. **Measurement pass** (a fresh subprocess per variant unless ``isolate=False``):
   every batch of the run's steps, SHA-256 digested; bytes read; bytes read by
   the first batch; the process's peak RSS, attributable to this variant alone.
2. **Timed trials**: every variant is opened once and warmed up (its first
   ``warmup_steps`` excluded), then trials alternate ``A B C D A B C D ...`` so
   a noisy neighbour or a frequency change hits every variant alike, each begun once
   the other variants' read-ahead rests (:func:`at_rest`). Each trial
   times ``steps`` batches; medians and spreads are reported. Digesting is kept
   out of the timed loop (it costs as much as a fast gather). Files workloads
   then run fresh passes, alternating too (:mod:`headrace.bench._fresh`).

Both passes read the same steps of the same plan, so the digests describe the
batches that were timed.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import headrace
from headrace._messages import byte_size
from headrace.bench import _au, _fresh
from headrace.bench._au import au_epochs, compute_times, demand_bytes_per_s, max_accelerators
from headrace.bench._ceiling import ceiling_notes, storage_ceiling
from headrace.bench._kind import Batch, Kind, VariantSpec
from headrace.bench._machine import meminfo
from headrace.bench._measure import (
    CHILD,
    CONFIG_EXIT,
    ERROR_EXIT,
    LIFELINE_FD,
    cpu_s_per_gb,
    measure_pass,
    pass_figures,
)
from headrace.bench._ratios import ratios
from headrace.bench._report import SHORT_TRIAL_STEPS, short_trials, table_figures
from headrace.bench._result_notes import accelerators_note, result_notes
from headrace.bench._slowfs_run import VariantMounts, slowfs_figures
from headrace.emulate import SlowFSConfig
from headrace.errors import ConfigError, HeadraceError
from headrace.io._in_flight import reads_in_flight
from headrace.io._memory import available_memory
from headrace.io._mounts import MEMORY_FS, mount_of, network_type
from headrace.io._pool import usable_cpus
from headrace.pipeline import Loader

__all__ = ["Interrupted", "RunOptions", "run_workload", "stop_name"]

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True, kw_only=True)
class RunOptions:
    """How to run a workload (the workload itself says what to run)."""

    #: measurement pass in a subprocess per variant (peak RSS attributable)
    isolate: bool = True
    #: read the dataset once first, so every variant starts from a warm page cache
    warm_cache: bool = True
    #: simulated accelerators fed by this host (demand scales by N)
    accelerators: int = 1
    #: also find the most accelerators each variant keeps at the AU threshold
    accelerators_auto: bool = False
    #: read the dataset through slowfs mounts of the root, one per variant (--storage slowfs)
    slowfs: SlowFSConfig | None = None
    #: the KEY of ``--sweep KEY=V1,V2``: ratios are taken among the variants at one value
    sweep_key: str | None = None


def _warm(paths: list[str]) -> None:
    """Read every file once, as a training job's data arrives: from the device.

    Pages a generator has just written sit in the page cache as they were
    written (4 KiB folios on ext4); read back through read-ahead they come in
    large folios that map 2 MiB at a time. Measured on a 256 MiB window: 21 ms
    to map the written pages, 2.5 ms once read back. So each file's clean
    pages are dropped first and read back, leaving the cache as real reads do.
    """
    buf = bytearray(16 << 20)
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            if hasattr(os, "posix_fadvise"):  # dirty pages are kept: nothing is lost
                os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            while f.readinto(buf):
                pass


#: How long before a timed trial :func:`at_rest` waits at most; how often it looks, and
#: how many looks in a row must find every other thread resting.
_REST_LIMIT_S, _REST_LOOK_S, _REST_LOOKS = 10.0, 0.005, 4


def _running_threads() -> int | None:
    """This process's threads but this one running or waiting for a CPU (``R``) or in an
    uninterruptible wait, a disk read (``D``): ``/proc/self/task/*/stat``; ``None`` where
    there is no ``/proc``. On a loaded machine a runnable thread may get no CPU for 40 ms,
    and its CPU time alone looked idle."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return None
    me, n = threading.get_native_id(), 0
    for task in tasks:
        if task == str(me):
            continue
        try:
            with open(f"/proc/self/task/{task}/stat", encoding="ascii") as f:
                fields = f.read().rpartition(")")[2].split()
        except OSError:  # ended meanwhile
            continue
        n += bool(fields) and fields[0] in ("R", "D")
    return n


def at_rest(limit_s: float = _REST_LIMIT_S) -> float:
    """Wait until this process's other threads rest, at most ``limit_s``: no read in flight,
    under 10% of a CPU spent by the other threads and none of them running (``R``, ``D``)
    at each of :data:`_REST_LOOKS` looks in a row. The seconds waited.

    Both: a thread that waits for a CPU on a loaded machine spends none (its state says
    it), and one that runs Python waits for the GIL while this thread looks (its CPU says
    it). Every variant's trial stream stays open through the others' trials, and a
    read-ahead refills its queue after its own: timed meanwhile, a trial shared the CPUs
    with the other variants' reads and decodes (DLIO UNet3D, 3 variants: iterable's trials
    1-3 read 100-109 MB, its own 56 MB and the others', at twice its CPU; trials 4-6 its
    own alone, once the others' read-ahead had reached their streams' ends), so the first
    trials did more and the later sped up."""
    t0 = time.monotonic()
    _fresh.settle(limit_s)
    quiet = 0
    while quiet < _REST_LOOKS and time.monotonic() - t0 < limit_s:
        c0 = time.process_time() - time.thread_time()  # the other threads' CPU
        time.sleep(_REST_LOOK_S)
        running = _running_threads()
        spent = time.process_time() - time.thread_time() - c0
        busy = bool(running) or spent >= 0.1 * _REST_LOOK_S or bool(reads_in_flight())
        quiet = 0 if busy else quiet + 1
    return time.monotonic() - t0


#: The child's last warnings kept in a failed variant's error.
_SAID = 5


def _measure_isolated(kind: Kind, spec: str, steps: int) -> dict[str, Any]:
    # The child must import this same headrace, whatever sys.path made us find it.
    src = os.path.dirname(os.path.dirname(os.path.abspath(headrace.__file__)))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [src, env.get("PYTHONPATH")]))
    req = {"workload": kind.workload.to_dict(), "root": kind.root, "variant": spec, "steps": steps}
    # The child's lifeline: it exits when the write end, held here alone (not inheritable),
    # closes, however this process ends (SIGKILL too). Ctrl-C and SIGTERM (see
    # headrace.cli.main) raise here, and subprocess.run kills the child itself.
    alive_r, alive_w = os.pipe()
    env[LIFELINE_FD] = str(alive_r)
    try:
        proc = subprocess.run(
            [sys.executable, *CHILD],
            input=json.dumps(req),
            capture_output=True,
            # What a C library wrote there need not be UTF-8: strict decoding raised
            # UnicodeDecodeError here, and the run ended with every variant's figures.
            encoding="utf-8",
            errors="replace",
            env=env,
            pass_fds=(alive_r,),
            check=False,
        )
    finally:
        os.close(alive_r)
        os.close(alive_w)
    name = f"variant {spec!r} of workload {kind.workload.name!r}"
    lines = proc.stderr.strip().splitlines()
    # Exits 3 and 4 promise a last line on stderr; without it (a library's exit(3)) they
    # are a crash like any other, below.
    if proc.returncode == CONFIG_EXIT and lines:
        raise ConfigError(lines[-1])
    if proc.returncode == ERROR_EXIT and lines:
        # With what the child logged before it (each retried try: what it met, after how
        # long): the error alone counts the tries, and a store that stalled (timeouts) or
        # refused (at once) under load read the same.
        said = [line for line in lines[:-1] if line.startswith("headrace: ")][-_SAID:]
        before = f" (before it: {' | '.join(said)})" if said else ""
        raise HeadraceError(f"{name}: {lines[-1]}{before}")
    result = _result(proc.stdout, spec) if proc.returncode == 0 else None
    if result is not None:
        return result
    raise HeadraceError(
        f"{name} failed in its measurement process (exit {proc.returncode})"
        f"{_how_it_ended(proc.returncode, proc.stdout)}"
        + (
            f"; its stderr:\n{proc.stderr.strip()[-2000:]}"
            if lines
            else "; it wrote nothing on stderr"
        )
    )


def _result(stdout: str, spec: str) -> dict[str, Any] | None:
    """The measurement process's result: the last line of ``stdout`` that holds its JSON
    object (``None``: none does). What else the process printed is passed over: an exit
    handler's line after it, a progress line without its newline before it (a JSON error
    from here ended the run, every variant's figures lost)."""
    start = '{"variant": '  # measure_pass's first key, as json.dumps writes it
    for line in reversed(stdout.splitlines()):
        at = line.find(start)
        while at >= 0:
            try:
                found, _ = json.JSONDecoder().raw_decode(line, at)
            except ValueError:
                found = None
            if isinstance(found, dict) and found.get("variant") == spec:
                return found
            at = line.find(start, at + 1)
    return None


def _how_it_ended(code: int, stdout: str) -> str:
    """What a measurement process's exit ``code`` says, beyond the number: the signal
    that killed it, or (exit 0) that it printed no result, and what it printed instead."""
    if code < 0:
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            return ""
        oom = " (what the kernel's OOM killer sends when memory runs out: see dmesg)"
        return f": killed by {sig}{oom if sig == 'SIGKILL' else ''}"
    if code == 0:
        out = stdout.strip()
        wrote = f": it wrote {out[-500:]!r}" if out else ""
        return f" without its result (a JSON line on stdout{wrote})"
    return ""


def _mean(values: list[float | None]) -> float | None:
    """The mean of the values measured (``None``: none was)."""
    known = [v for v in values if v is not None]
    return statistics.fmean(known) if known else None


def _spread(values: list[float]) -> dict[str, float]:
    return {"min": min(values), "max": max(values), "median": statistics.median(values)}


def stop_name(exc: BaseException) -> str:
    """How a run was stopped, in words: Ctrl-C is a KeyboardInterrupt, SIGTERM a
    SystemExit (:func:`headrace.cli.main` raises it)."""
    return "Ctrl-C" if isinstance(exc, KeyboardInterrupt) else "SIGTERM"


class Interrupted(BaseException):
    """Ctrl-C or SIGTERM in a workload, with what it finished: the summary and results of
    the variants with their measurement pass and at least one trial done, and the
    interrupt (``cause``) to go on with once they are reported. A BaseException, as the
    interrupt it carries: nothing that catches errors may take it for one."""

    def __init__(
        self,
        summary: dict[str, Any],
        results: list[dict[str, Any]],
        cause: KeyboardInterrupt | SystemExit,
    ) -> None:
        super().__init__(stop_name(cause))
        self.summary, self.results, self.cause = summary, results, cause


def run_workload(
    kind: Kind, *, options: RunOptions | None = None, progress: Progress | None = None
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Measure every variant of ``kind``'s workload: (workload summary, results).

    The dataset is served for the run (``kind.serve()``: a local S3 endpoint,
    say) and stopped after; with ``options.slowfs`` each variant reads it through a
    slowfs mount of its own, unmounted after (:class:`VariantMounts`).
    """
    opts = options or RunOptions()
    public = kind.workload  # before serving adds endpoints and credentials
    mounts = None if opts.slowfs is None else VariantMounts(kind.root, opts.slowfs)
    stopped: Interrupted | None = None
    with kind.serve(), mounts if mounts is not None else contextlib.nullcontext():
        try:
            summary, results = _run(kind, opts, progress, _variant_kinds(kind, mounts), mounts)
        except Interrupted as exc:  # completed below, once the mounts are gone
            stopped = exc
            summary, results = exc.summary, exc.results
    summary["workload"] = public.to_dict()
    if mounts is not None:
        for res in results:
            res["slowfs"] = slowfs_figures(mounts.final_stats.get(res["variant"]))
    if stopped is not None:
        raise stopped
    return summary, results


# The key of the storage ceiling's own mount (a variant's spec has no spaces).
_CEILING = "storage ceiling"


def _variant_kinds(kind: Kind, mounts: VariantMounts | None) -> Callable[[str], Kind]:
    """Each variant's kind: ``kind`` itself, or over the variant's own slowfs mount."""
    if mounts is None:
        return lambda _spec: kind
    made: dict[str, Kind] = {}

    def of(spec: str) -> Kind:
        if spec not in made:
            made[spec] = type(kind).make(kind.workload, mounts.root_for(spec))
        return made[spec]

    return of


def _read_rates(res: dict[str, Any]) -> dict[str, float | None]:
    """Bytes read per second (10^9 B/s) at the rate the table shows, every variant alike:
    ``read_gb_per_s`` from storage, ``cache_read_gb_per_s`` from a cached variant's local
    object cache (``None`` without one). The payload GB/s counts what the kind says
    (decoded images for hub-images' headrace-raw too, which hands over the stored JPEGs).
    Until 2026-12-03 a cached variant's reads of its cache were counted as storage's."""
    steps = res["steps"]
    if not steps:
        return {"read_gb_per_s": None, "cache_read_gb_per_s": None}
    per_byte = res["table"]["batches_per_s"] / steps / 1e9
    hits = (res.get("cache") or {}).get("hit_bytes")
    # The cache also counts the read-ahead's hits still in flight when the pass ended.
    cached = None if hits is None else min(hits, res["bytes_read"])
    return {
        "read_gb_per_s": (res["bytes_read"] - (cached or 0)) * per_byte,
        "cache_read_gb_per_s": None if cached is None else cached * per_byte,
    }


def _run(
    kind: Kind,
    opts: RunOptions,
    progress: Progress | None,
    of: Callable[[str], Kind],
    mounts: VariantMounts | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    wl, t = kind.workload, kind.workload.train
    warmup = max(1, t.warmup_steps)
    n_acc = max(1, opts.accelerators)
    has_compute = t.computation_time > 0
    compute_steps = t.trials * t.steps if has_compute else 0
    timed = warmup + t.trials * t.steps  # what the timed trials' streams are opened for
    digest_steps = kind.digest_steps(timed + compute_steps * n_acc)
    specs = list(wl.variants)
    mem_before = meminfo()
    # What the page cache can hold: a container's limit bounds it, whatever the host has.
    room = available_memory()
    free = room.available if room is not None else 0
    if opts.warm_cache:
        _warm(kind.files())
    mem_warm = meminfo()

    # A variant that fails (storage or data said no) is reported and left out; the others
    # are measured. Aborting lost every figure of the run, the failed variant's last.
    failed: dict[str, str] = {}

    def fail(spec: str, exc: HeadraceError) -> None:
        if isinstance(exc, ConfigError):
            raise exc  # the user's settings: the run as asked cannot be made
        text = str(exc)
        if not text.startswith("variant "):  # measured in this process: name it
            text = f"variant {spec!r} of workload {wl.name!r}: {type(exc).__name__}: {text}"
        failed.setdefault(spec, text)

    def ended(spec: str, where: str) -> HeadraceError:
        """``spec``'s trial stream ended ``where``, short of its steps: StopIteration out
        of the timed loop ended the run, every variant's figures lost."""
        m = measured[spec]["steps"]
        return HeadraceError(
            f"variant {spec!r} of workload {wl.name!r}: its stream ended {where}, short of "
            f"the {timed:,} batches it was opened for (its measurement pass delivered "
            f"{m:,} of {digest_steps:,}): a variant must deliver every step it is asked for"
        )

    # What each phase finished is kept: Ctrl-C or SIGTERM reports the variants that
    # have their measurement pass and a trial done (``stopped``), not nothing.
    measured: dict[str, dict[str, Any]] = {}
    its: dict[str, Iterator[Batch]] = {}
    streams = {}
    first_s: dict[str, float] = {}
    rates: dict[str, list[float]] = {s: [] for s in specs}
    # Per variant, each epoch's (AU, loader seconds per counted step; None: none counted).
    au: dict[str, list[tuple[float, float | None]]] = {s: [] for s in specs}
    au_warm: dict[str, float] = {}  # each variant's warm-up epoch's AU, kept out of the mean
    fresh: dict[str, list[tuple[float, float]]] = {}  # (warm-up s, counted s) per pass
    max_acc: dict[str, int] = {}
    # The Loaders each variant's trial stream opened (see ``read_ahead`` below).
    trial_loaders: dict[str, list[Loader]] = {}
    mem_after = mem_warm
    phase = "measurement passes"
    stopped: KeyboardInterrupt | SystemExit | None = None
    try:
        # 1. measurement passes
        for i, spec in enumerate(specs):
            if progress:
                progress(f"{wl.name}: digest {spec}", i, len(specs))
            try:
                if opts.isolate:
                    measured[spec] = _measure_isolated(of(spec), spec, digest_steps)
                else:
                    measured[spec] = measure_pass(of(spec), spec, digest_steps)
                    measured[spec]["peak_rss_bytes"] = None  # one process: not attributable
                    measured[spec]["rss_baseline_bytes"] = None
            except HeadraceError as exc:
                fail(spec, exc)
            _fresh.settle()  # its last reads must not count in the next variant's figures
        specs = [s for s in specs if s not in failed]
        if not specs:
            raise HeadraceError("; ".join(failed.values()))

        # 2. timed trials, alternating
        phase = "trials"
        with_compute = t.trials + _au.WARMUP_EPOCHS if has_compute else 0
        done, work = 0, (t.trials + with_compute + _fresh.passes(kind)) * len(specs)
        try:
            for spec in specs:
                try:
                    opened = len(of(spec).loaders)
                    t0 = time.perf_counter()
                    streams[spec] = of(spec).open(spec, timed)
                    trial_loaders[spec] = of(spec).loaders[opened:]
                    its[spec] = iter(streams[spec])
                    next(its[spec])
                    first_s[spec] = time.perf_counter() - t0
                    for _ in range(warmup - 1):
                        next(its[spec])
                except StopIteration:
                    fail(spec, ended(spec, "in its warm-up"))
                except HeadraceError as exc:
                    fail(spec, exc)
            for _ in range(t.trials):
                for spec in specs:
                    if spec in failed:
                        continue
                    it = its[spec]
                    at_rest()  # the other variants' read-ahead refilled, not racing this trial
                    try:
                        t0 = time.perf_counter()
                        for _ in range(t.steps):
                            next(it)
                        dt = time.perf_counter() - t0
                    except StopIteration:
                        fail(spec, ended(spec, f"in trial {len(rates[spec]) + 1} of {t.trials}"))
                        continue
                    except HeadraceError as exc:
                        fail(spec, exc)
                        continue
                    rates[spec].append(t.steps / dt)
                    done += 1
                    if progress:
                        progress(f"{wl.name}: trials", done, work)
        finally:
            for s in streams.values():
                s.close()
            _fresh.settle()
        # 2b. files kinds: fresh passes, alternating (their shown figure; see _fresh.py).

        def pass_done() -> None:
            nonlocal done
            done += 1
            if progress:
                progress(f"{wl.name}: fresh passes", done, work)

        phase = "fresh passes"
        live = [s for s in specs if s not in failed]
        _fresh.alternate(
            live, of, digest_steps, _fresh.passes(kind), fail, pass_done, fresh, warmup
        )
        # 3. the loader with (simulated) compute: accelerator utilisation. Each variant gets a
        # fresh stream and runs its trials (DLIO's epochs) back to back, each trial's first
        # step excluded and the run's AU the mean of the trials', as DLIO computes it (_au.py),
        # after a warm-up epoch kept out of the mean: the trial streams above sat idle while
        # the other variants ran, so their read-ahead queues were full, and an AU measured on
        # them credited the loader with that idle time.
        phase = "trials with compute"
        comp_t = compute_times(t, t.trials * t.steps)
        for spec in specs if has_compute else ():
            if spec in failed:
                continue

            def epoch_done(
                epoch: tuple[float, float | None], spec: str = spec, warm: bool = False
            ) -> None:
                nonlocal done
                if warm:
                    au_warm[spec] = epoch[0]
                else:
                    au[spec].append(epoch)
                done += 1
                if progress:
                    progress(f"{wl.name}: trials with compute", done, work)

            def warmed(epoch: tuple[float, float | None], spec: str = spec) -> None:
                epoch_done(epoch, spec, warm=True)

            try:
                # The measurement the search for max acc. judges each count by, as it is.
                au_epochs(of(spec), spec, n_acc, comp_t, t.steps, epoch_done, warmed)
            except HeadraceError as exc:
                fail(spec, exc)
            finally:
                _fresh.settle()
        mem_after = meminfo()
        phase = "search for the most accelerators"
        for spec in specs if opts.accelerators_auto and has_compute else ():
            if kind.digested(spec) and spec not in failed:
                # Searched from the verdict the AU column shows, which it must not contradict,
                # each count judged by the AU column's measurement (au_epochs: one 7-step
                # epoch said 1 where `--accelerators 2` passed at AU 0.98);
                # where trials of one step measured none (AU 0 by definition), on epochs of its
                # own: from "known to fail" it printed max acc. 0 for every variant of the
                # documented `--dlio unet3d_h100.yaml --scale 0.05 --accelerators auto`.
                passed = _au.run_au([a for a, _ in au[spec]]) >= t.au_threshold
                known = (n_acc, passed) if t.steps > _au.EXCLUDE_START_STEPS else None
                try:
                    max_acc[spec] = max_accelerators(of(spec), spec, known=known)
                except HeadraceError as exc:
                    fail(spec, exc)
        specs = [s for s in specs if s not in failed]
        if not specs:
            raise HeadraceError("; ".join(failed.values()))

    except (KeyboardInterrupt, SystemExit) as exc:
        stopped = exc
        mem_after = meminfo()
        specs = [s for s in specs if s in measured and rates.get(s) and s not in failed]
        if _fresh.passes(kind):
            # Shown by fresh passes alone: a files variant's trials start from a full
            # read-ahead queue (50,443 batches/s, 468 GB/s from S3 behind 20 ms, where
            # the passes finished were dropped and the trials shown).
            specs = [s for s in specs if fresh.get(s)]
        if not specs:
            raise
    payload_per_batch = round(kind.record_bytes() * kind.host_batch)
    mount = mount_of(kind.root) if kind.storage == "local" else None
    # tmpfs: the files are memory, and O_DIRECT there (Linux 6.6+) reads memory too; its
    # "device (O_DIRECT) ceiling" called variants above it page-cache hits.
    in_memory = mount is not None and mount.fstype in MEMORY_FS and opts.slowfs is None
    notes: list[str] = [
        f"{wl.name}/{spec}: failed, left out of the figures and the digest comparison: {text}"
        for spec, text in failed.items()
    ]
    results: list[dict[str, Any]] = []
    yardsticks: dict[int, tuple[int, int]] = {}  # steps -> (delivered, unique): plans cost
    ds_bytes = kind.dataset_bytes()
    # Files read buffered from local disk that fits in free memory: the digested pass
    # read each file before the fresh passes, so they read the page cache.
    cached_disk = kind.storage == "local" and opts.slowfs is None and (in_memory or ds_bytes < free)
    for spec in specs:
        m = measured[spec]
        if fresh.get(spec):
            # Each pass's seconds after its warm-up steps, which are timed apart and left
            # out of the figure, as the trials leave theirs out (see _fresh.fresh_pass_s).
            m["fresh_passes_s"] = [s for _, s in fresh[spec]]
            m["fresh_pass_s"] = statistics.median(m["fresh_passes_s"])
            m["fresh_passes_warmup_s"] = [w for w, _ in fresh[spec]]
            m["fresh_pass_warmup_steps"] = warmup
            m["fresh_pass_page_cache"] = cached_disk and not _fresh.reads_past_cache(kind, spec)
        med = statistics.median(rates[spec])
        # Interrupted in the trials with compute, a variant may have none of them.
        run_au = _au.run_au([a for a, _ in au[spec]]) if has_compute and au[spec] else None
        if m["steps"] not in yardsticks:
            n = m["steps"]
            yardsticks[n] = (kind.payload_bytes(0, n), kind.unique_payload_bytes(n))
        delivered, unique = yardsticks[m["steps"]]
        counted = m.get("bytes_delivered")
        group, order = kind.digest_rule(spec)
        must_agree = kind.digested(spec)
        compared: str | None = "ordered" if must_agree else None
        if must_agree and order == "any":
            # The steps the run asked of every variant, not those this one delivered: an
            # order-free variant that dropped a batch of whole epochs was taken for a run
            # not covering them, and escaped the comparison with a note (exit 0).
            if kind.canonical_comparable(digest_steps) and m.get("canonical_digest"):
                compared = "canonical"
            else:
                must_agree, compared = False, None
                notes.append(
                    f"{wl.name}/{spec}: reads in another order by design and the run does not "
                    "cover whole epochs on one host: its digest is not compared"
                )
        results.append(
            {
                "workload": wl.name,
                "variant": spec,
                "batches_per_s": med,
                "batches_per_s_spread": _spread(rates[spec]),
                # Each timed trial's batches/s, in the order run (whose median batches_per_s is)
                "batches_per_s_trials": list(rates[spec]),
                "gb_per_s": med * payload_per_batch / 1e9,
                "digest": m["digest"],
                "canonical_digest": m.get("canonical_digest"),
                "digest_group": group,
                "digest_compared": compared,
                "must_agree": must_agree,
                "bytes_before_first_batch": m["bytes_before_first_batch"],
                "time_to_first_batch_s": first_s[spec],
                "peak_rss_bytes": m["peak_rss_bytes"],
                "rss_baseline_bytes": m["rss_baseline_bytes"],
                "cpu_s_per_gb": cpu_s_per_gb(m, delivered if counted is None else counted),
                "bytes_read": m["bytes_read"],
                # Counted on the batches where their arrays show it, else from the plan.
                "bytes_delivered": delivered if counted is None else counted,
                "unique_bytes_delivered": unique,
                "amplification": m["bytes_read"] / unique if unique else None,
                "au": run_au,
                "au_pass": run_au >= t.au_threshold if run_au is not None else None,
                # None where no step was counted (trials of 1 step): not 0 s of waiting.
                "loader_s_per_step_with_compute": _mean([ld for _, ld in au[spec]]),
                # Each trial's (DLIO epoch's) AU, whose mean ``au`` is: the mean alone hid
                # trials of 0.42 and 0.99 in one run, and could not be checked.
                "au_trials": [a for a, _ in au[spec]] if run_au is not None else None,
                # The warm-up epoch on the same fresh stream before them, out of the mean: the
                # first epoch of a fresh stream was below the later ones' mean in 9 of 12 (_au.py).
                "au_warmup": au_warm.get(spec) if run_au is not None else None,
                "max_accelerators": max_acc.get(spec),
                "steps": m["steps"],
                "trials": len(rates[spec]),  # the trials done: fewer, interrupted
                "steps_per_trial": t.steps,
                "read_ahead": spec in of(spec).reading_ahead
                # Without a read-ahead thread a Loader still gathers a chunk of steps at
                # its first batch: a short trial of headrace-sync found the batches of
                # the chunk the trial before it had started (1,304,916 batches/s at most
                # beside a median of 13,935), and was said to start from nothing.
                or any(ld.max_chunk_steps > 1 for ld in trial_loaders.get(spec, ())),
                **pass_figures(kind, m),
                **of(spec).result_extras(spec),
                **_slowfs_extras(opts.slowfs),
            }
        )
    ratios(results, opts.sweep_key)
    for res in results:
        res["table"] = table_figures(res)
        if res["table"]["from"] == "fresh_pass":
            # One figure per row: the table's. A files result's headline was its trials'
            # median, which starts from a queue filled while the other variants ran (DLIO
            # ResNet-50 map-style: 266,624 batches/s beside the table's tens); each trial
            # stays in batches_per_s_trials.
            shown = res["table"]
            res["batches_per_s"], res["gb_per_s"] = shown["batches_per_s"], shown["gb_per_s"]
            res["batches_per_s_spread"] = {
                **shown["batches_per_s_spread"],
                "median": shown["batches_per_s"],
            }
        res.update(_read_rates(res))
    # Through slowfs, each variant's depth as its mount saw it: READs in flight. A token
    # or row variant names no in_flight, and a ceiling of the pool's 8 threads bounded
    # variants that kept 64 READs in flight (tokens at 10 ms per READ).
    variant_reads = [
        n for s in specs if mounts is not None and (n := mounts.max_in_flight(s)) is not None
    ]
    ceiling = (
        # Through a mount of its own: bare reads that leave no pages for any variant.
        storage_ceiling(
            of(_CEILING) if opts.slowfs else kind,
            depth=max([0, *(int(r.get("in_flight") or 0) for r in results), *variant_reads]),
        )
        # Interrupted: not measured (seconds of reads after the user asked to stop).
        if kind.storage == "local" and not in_memory and stopped is None
        else {"gb_per_s": None, "bytes": 0, "o_direct": False, "threads": 0}
    )
    if mounts is not None and ceiling["gb_per_s"] is not None:
        ceiling["reads_in_flight"] = mounts.max_in_flight(_CEILING)
        ceiling["variant_reads_in_flight"] = max(variant_reads, default=None)
    notes += ceiling_notes(
        wl.name,
        # memcpy copies from memory by design: "served from the page cache" said of it
        [r for r in results if VariantSpec.parse(r["variant"]).name not in kind.from_memory],
        ceiling,
        kind.stored_per_payload(),
        opts.slowfs is not None,
        network=mount.fstype if mount is not None and network_type(mount.fstype) else None,
    )
    if (opts.accelerators > 1 or opts.accelerators_auto) and not has_compute:
        notes.append(
            f"{wl.name}: --accelerators has no effect without simulated compute (its "
            "computation_time is 0: the loader alone); give the workload a computation_time "
            "to measure accelerator utilisation"
        )
    topped = [f"{s} at {n:,}" for s, n in max_acc.items() if n >= _au.MOST_ACCELERATORS]
    if topped:
        # Not bisected towards twice the top, never tried (8191 was reported so).
        notes.append(
            f"{wl.name}: kept AU at the most simulated accelerators the search tries "
            f"({_au.MOST_ACCELERATORS:,}, or the run's own --accelerators): "
            f"{', '.join(topped)}; their max acc. (the table's N+) is at least that"
        )
    warm_au = [
        f"{r['variant']} {r['au_warmup']:.2f}" for r in results if r["au_warmup"] is not None
    ]
    if has_compute and t.steps > _au.EXCLUDE_START_STEPS and warm_au:
        # Said where the AU is, so that a reader of the table knows which epochs it is of.
        notes.append(
            f"{wl.name}: AU is the mean of the {t.trials} trial(s) with compute after a warm-up "
            "epoch on each variant's fresh stream, which is left out of it (a fresh stream "
            f"starts its read-ahead and thread pools from nothing): warm-up AU {', '.join(warm_au)}"
        )
    if has_compute and t.steps < 2:
        # DLIO's AU leaves each epoch's first step out: a trial of one step counts none.
        notes.append(
            f"{wl.name}: trials of 1 step leave no step to count (AU leaves each trial's first "
            "out, as DLIO does): AU is 0 by definition, not a measurement; use --steps 2 or "
            "more to measure it"
            + (
                f" (max acc. was searched on epochs of {_au.default_probe_steps(t)} steps of "
                "its own)"
                if opts.accelerators_auto
                else ""
            )
        )
    # The variants the table stars, as it does: `--variants naive,memcpy --steps 4` starred
    # none and judged naive against the ceiling, under a note that said otherwise.
    if any(short_trials(r) and r.get("mb_per_s") is None for r in results):
        # Whatever the storage: a loader that read ahead while the other variants ran
        # starts its trial with batches in hand (millions of batches/s from 20 ms S3).
        notes.append(
            f"{wl.name}: trials of {t.steps} steps are short beside a read-ahead queue: "
            "each starts with batches read while the other variants ran, so batches/s and "
            "the ratios overstate a loader"
            + (
                " (their GB/s are not judged against the read ceiling)"
                if ceiling["gb_per_s"]
                else ""
            )
            + f"; use --steps {SHORT_TRIAL_STEPS} or more, or "
            "read its measurement pass (where the time went: steps over in next s)"
        )
    notes += result_notes(wl.name, results)
    # The question a storage engineer runs this for, answered where a reader can redo the
    # sums: every variant "max acc. 0" left it open how far short the storage was.
    sizing = accelerators_note(
        wl.name,
        results,
        demand=demand_bytes_per_s(kind),
        threshold=t.au_threshold,
        ceiling_gbps=ceiling["gb_per_s"],
        stored_per_payload=kind.stored_per_payload(),
        accelerators=n_acc,
        auto=opts.accelerators_auto,
        cpus=usable_cpus(),
        ceiling_bytes=int(ceiling.get("bytes") or 0),
        drawn=_au.drawn_records(kind),
    )
    if sizing is not None:
        notes.append(sizing)
    if mount is not None and network_type(mount.fstype):
        notes.append(
            f"{wl.name}: the dataset is on a network or FUSE file system ({mount.fstype} at "
            f"{mount.mount}): every read that misses the page cache is a round trip, and "
            "headrace's readers keep more of them in flight there (docs/emulate-slowfs.md)"
        )
    if opts.slowfs is not None:
        notes.append(_slowfs_note(wl.name, opts.slowfs, ds_bytes, free))
    elif in_memory and mount is not None:
        notes.append(
            f"{wl.name}: the dataset is on {mount.fstype} ({mount.mount}), which keeps files "
            "in memory: every figure is a memory read, and there is no device to measure a "
            "read ceiling of; give --root on the storage you mean to train from"
        )
    elif kind.storage == "local" and room is not None and ds_bytes < free:
        notes.append(
            f"{wl.name}: the dataset ({byte_size(ds_bytes)}) fits in free memory "
            f"({free / 1e9:.1f} GB available, {room.which()}): figures are "
            "page-cache reads unless the storage ceiling says otherwise"
        )
    summary = {
        "name": wl.name,
        "kind": wl.kind,
        "description": wl.description,
        "workload": wl.to_dict(),
        "storage": "slowfs" if opts.slowfs else kind.storage,
        **({"slowfs": _slowfs_settings(opts.slowfs)} if opts.slowfs else {}),
        **({"s3": kind.store.summary()} if kind.store is not None and kind.store.remote else {}),
        "payload_bytes_per_batch": payload_per_batch,
        "accelerators": n_acc,
        "au_threshold": t.au_threshold,
        "computation_time_s": t.computation_time,
        "demand_bytes_per_s": demand_bytes_per_s(kind, n_acc),
        "gb_per_s_counts": kind.payload_counts(),
        "storage_ceiling": ceiling,
        "notes": notes,
        "record_bytes": kind.record_bytes(),
        "dataset_bytes": ds_bytes,
        "dataset_files": len(kind.files()),
        "memory": {
            "mem_total_bytes": mem_before.get("MemTotal", 0),
            "cached_before_bytes": mem_before.get("Cached", 0),
            "cached_after_warm_bytes": mem_warm.get("Cached", 0),
            "cached_after_bytes": mem_after.get("Cached", 0),
        },
        "mismatches": mismatches(results, opts.sweep_key),
        "failed": [{"variant": spec, "error": text} for spec, text in failed.items()],
    }
    if stopped is not None:
        summary["interrupted"] = True
        left = [s for s in wl.variants if s not in specs and s not in failed]
        rounds = _fresh.passes(kind)
        finished = (
            ", ".join(f"{s} {len(fresh[s])} of {rounds} fresh passes" for s in specs)
            if rounds
            else ", ".join(f"{s} {len(rates[s])} of {t.trials}" for s in specs)
        )
        notes.insert(
            0,
            f"{wl.name}: interrupted ({stop_name(stopped)}) during its {phase}: the figures "
            f"are the {'fresh passes' if rounds else 'trials'} finished ({finished})"
            + (f"; not measured: {', '.join(left)}" if left else "")
            + "; no storage ceiling",
        )
        raise Interrupted(summary, results, stopped)
    return summary, results


def _slowfs_settings(config: SlowFSConfig) -> dict[str, Any]:
    """The mounts' settings, as the report states them."""
    return {
        "read_latency_ms": config.read_latency_ms,
        "open_latency_ms": config.open_latency_ms,
        "max_background": config.max_background,
        "max_threads": config.max_threads,
        "mount": "one per variant",
    }


def _slowfs_extras(config: SlowFSConfig | None) -> dict[str, Any]:
    """A result's storage fields under ``--storage slowfs`` (``{}`` otherwise)."""
    if config is None:
        return {}
    return {
        "storage": "slowfs",
        "latency_ms": config.read_latency_ms,
        "open_latency_ms": config.open_latency_ms,
    }


def _slowfs_note(name: str, config: SlowFSConfig, ds_bytes: int, free: int) -> str:
    """What the figures of a run through slowfs are: cold per variant, then its own cache
    (``free``: the memory available, host's or container's)."""
    fits = ds_bytes < free
    return (
        f"{name}: read through slowfs, {config.read_latency_ms:g} ms per READ and "
        f"{config.open_latency_ms:g} ms per open, each variant on a mount of its own: none "
        "reads pages another variant fetched, and each open starts its file cold; pages a "
        "variant fetched stay cached while it keeps its file open, as on a network mount"
        + (
            f" (the dataset, {byte_size(ds_bytes)}, fits in free memory: the more of it "
            "a variant has read, the more its later steps are page-cache reads)"
            if fits
            else ""
        )
    )


def mismatches(results: list[dict[str, Any]], sweep_key: str | None = None) -> list[list[str]]:
    """Groups of variants by digest, where variants that must agree do not.

    Within each digest group, variants compared ``ordered`` must have one
    digest, and when the group has a variant compared ``canonical`` (another
    order by design), every variant of the group must have one canonical digest.
    Under ``--sweep KEY=...`` (``sweep_key``) variants agree at each value of it only:
    ``--sweep seed=0,1`` reads other batches at each seed, and was reported as a
    mismatch (exit 1) where every variant agreed at each.
    """
    out: list[list[str]] = []
    groups: dict[tuple[str, str | None], list[dict[str, Any]]] = {}
    for r in results:
        if r["must_agree"] and r["digest"] is not None:
            swept = None
            if sweep_key is not None:
                swept = VariantSpec.parse(r["variant"]).options.get(sweep_key)
            groups.setdefault((r.get("digest_group", ""), swept), []).append(r)
    for members in groups.values():
        ordered: dict[str, list[str]] = {}
        for r in members:
            if r.get("digest_compared", "ordered") == "ordered":
                ordered.setdefault(r["digest"], []).append(r["variant"])
        if len(ordered) > 1:
            out += ordered.values()
            continue
        if any(r.get("digest_compared") == "canonical" for r in members):
            canon: dict[str, list[str]] = {}
            for r in members:
                canon.setdefault(str(r.get("canonical_digest")), []).append(r["variant"])
            if len(canon) > 1:
                out += canon.values()
    return out
