"""``headrace bench``: run workloads side by side and report.

With no arguments: the default ``tokens`` suite (1 GiB uint32 token file,
generated once under ``~/.cache/headrace/bench``), naive vs headrace vs memcpy.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from headrace._messages import byte_size
from headrace._output_path import check_output_path, refuse_output_over_input
from headrace._store_option import add_store_option
from headrace.bench._args import (
    check_ranges,
    parse_accelerators,
    parse_sweep,
    refuse_scales_without_dlio,
    refuse_workloads_with_dlio,
    size_changes,
    slowfs_config,
)
from headrace.bench._au import drawn_records
from headrace.bench._kind import Kind, make_kind, room_for
from headrace.bench._machine import machine_info
from headrace.bench._overrides import storage_options, workloads
from headrace.bench._report import SCHEMA_VERSION, print_report, report_json, write_json
from headrace.bench._runner import Interrupted, Progress, RunOptions, run_workload, stop_name
from headrace.bench._slowfs_run import fuse_check
from headrace.bench._workload import WARMUP_EPOCHS, Workload, naming
from headrace.emulate import SlowFSConfig
from headrace.emulate._mounts import gone_mount
from headrace.errors import ConfigError, HeadraceError
from headrace.io._file import url_typo

__all__ = [
    "check",
    "check_output_path",
    "configure",
    "default_root",
    "prepare_root",
    "refuse_url_typo",
    "run",
    "url_scheme",
]


def default_root() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "headrace", "bench")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "action",
        nargs="*",
        help="'compare A.json B.json' prints ratios between two reports; "
        "'plot R.json --plot R.png' draws a report's plot without running again",
    )
    parser.add_argument("--list", action="store_true", help="list the built-in workloads")
    parser.add_argument("--dlio", metavar="YAML", help="run a DLIO workload YAML")
    parser.add_argument("--scale", type=float, help="DLIO: multiply file count (default 1)")
    parser.add_argument(
        "--record-scale",
        type=float,
        help="DLIO: multiply record sizes and compute time (demand per accelerator kept; "
        "default 1)",
    )
    parser.add_argument(
        "--accelerators", default="1", help="simulated accelerators per host, or 'auto'"
    )
    parser.add_argument(
        "--sweep",
        metavar="KEY=V1,V2",
        help="run each variant at each value of one of its options (block_mib=1,4 for "
        "tokens, in_flight=1,8,32 for file workloads)",
    )
    parser.add_argument("--plot", metavar="PATH.png", help="plot throughput and AU per variant")
    parser.add_argument(
        "--workload",
        "-w",
        action="append",
        help="built-in workload name or TOML path (repeatable; default: tokens)",
    )
    parser.add_argument("--root", default=None, help=f"dataset folder (default: {default_root()})")
    parser.add_argument("--token-file-gib", type=float, help="token file size in GiB")
    parser.add_argument("--files", type=int, help="files workloads: how many files")
    parser.add_argument("--steps", type=int, help="steps per timed trial")
    parser.add_argument("--trials", type=int, help="timed trials per variant")
    parser.add_argument("--warmup", type=int, help="warm-up steps per variant (not timed)")
    parser.add_argument("--batch-size", type=int, help="global batch size")
    parser.add_argument(
        "--variants", help="comma-separated variant specs (name or name?key=value&...)"
    )
    parser.add_argument(
        "--storage",
        choices=("local", "s3", "slowfs"),
        help="local disk; S3 (jpeg, npz, hdf5, tokens, megatron, parquet, hub-images and "
        "--dlio: moto started on 127.0.0.1 unless --endpoint); or slowfs: --root read "
        "through a FUSE mount with a delay per READ and open, one mount per variant (needs "
        "fuse3)",
    )
    parser.add_argument(
        "--storage-url",
        metavar="URL",
        help="where the dataset goes: s3://BUCKET/PREFIX, or gs:// or az:// (an existing "
        "bucket or container; credentials as --store-option or the store's own variables)",
    )
    parser.add_argument(
        "--endpoint",
        metavar="URL",
        help="an existing S3 endpoint to use; with a gs:// or az:// --storage-url, that "
        "store's endpoint (fake-gcs-server, Azurite)",
    )
    add_store_option(parser)
    parser.add_argument(
        "--latency-ms",
        type=float,
        help="S3: a latency proxy's delay per request; slowfs: the delay of every FUSE READ "
        "(default 10)",
    )
    parser.add_argument(
        "--open-latency-ms",
        type=float,
        help="slowfs: the delay of every open (default: --latency-ms)",
    )
    parser.add_argument(
        "--max-concurrent",
        type=int,
        metavar="N",
        help="the proxy answers 503 SlowDown to S3 requests beyond N at once (a throttling store)",
    )
    parser.add_argument(
        "--json",
        metavar="PATH",
        help="write the report as JSON (- for stdout; the tables then go to stderr)",
    )
    parser.add_argument(
        "--no-isolate",
        action="store_true",
        help="measure digests in this process (faster; no per-variant peak RSS)",
    )
    parser.add_argument(
        "--max-slowdown",
        metavar="PCT",
        type=float,
        help="compare: exit 1 where a variant is slower in B than in A beyond the trials' "
        "spread and by more than PCT percent (default 5)",
    )
    parser.add_argument(
        "--max-au-drop",
        metavar="POINTS",
        type=float,
        help="compare: exit 1 where a variant's AU is lower in B than in A beyond the trials' "
        "spread and by more than POINTS (AU x 100, as DLIO prints it; default 5)",
    )
    parser.add_argument("--quiet", "-q", action="store_true", help="no progress bar")


_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")


def url_scheme(root: str) -> str | None:
    """The scheme of ``root`` when it is a URL (``s3://...``), else None (a local path)."""
    m = _URL.match(root)
    return m.group(1).lower() if m else None


def refuse_url_typo(flag: str, root: str, meant_flag: str | None = None) -> None:
    """Refuse a folder not there yet whose name is an object URL with a typo in its
    scheme (``s3:/bucket/x``, ``s3:bucket/x``): ``gen --root s3:/bkt/ds`` wrote the
    dataset into a new local folder ``./s3:/bkt/ds`` and exited 0, and ``bench --root``
    ran its whole length there. ``meant_flag``: the flag that takes the URL (gen's
    ``--root``); else the message says where a URL goes. One that exists is used."""
    meant = url_typo(root)
    if meant is None or os.path.lexists(root):
        return
    if meant_flag:
        where = f"did you mean {meant_flag} {meant}?"
    elif flag == "--root":
        where = (
            f"{flag} takes a local folder (a dataset on S3: --storage s3 --storage-url "
            f"{meant}; to write one there: headrace gen WORKLOAD --root {meant})."
        )
    else:
        where = f"{flag} takes a local folder."
    raise ConfigError(
        f"{flag} {root!r} looks like the URL {meant!r} mistyped, and would be created as a "
        f"local folder of that name: {where} For such a local folder give {flag} ./{root}"
    )


def _refuse_unexpanded_home(flag: str, root: str) -> None:
    """Refuse a folder whose path starts with a ``~`` nothing expanded: it was made as a
    folder named ``~`` under the working folder (and ``rm -rf ~``, to remove it, removes
    a home). The default root is one where HOME is unset and the uid has no password
    entry (``docker run -u 12345``, Kubernetes ``runAsUser``); a given one, where the
    shell left it quoted (``--root "~/x"``, or ``--root=~/x`` in sh)."""
    tilde = root.split(os.sep, 1)[0]
    if not tilde.startswith("~"):
        return
    cwd = os.getcwd()
    home = os.path.expanduser(root)
    if home == root:
        why, or_set = f"there is no user {tilde[1:]!r}", ""
        if tilde == "~":
            why = f"HOME is unset and uid {os.getuid()} has no entry in the password database"
            or_set = ", or set HOME or XDG_CACHE_HOME (the default --root is under it)"
        raise ConfigError(
            f"{flag} {root!r}: {tilde!r} names no home folder here ({why}), so it would be "
            f"made as a folder named {tilde!r} under {cwd}: give {flag} DIR (a writable "
            f"folder){or_set}"
        )
    raise ConfigError(
        f"{flag} {root!r} starts with a '~' that the shell did not expand (quoted?), and "
        f"would be made as a folder named '~' under {cwd}: give {flag} {home}, or "
        f"{flag} ./{root} for such a folder"
    )


def _example_root() -> str:
    """A folder to suggest for ``--root``: under ``$TMPDIR`` where the site sets one."""
    try:
        where = tempfile.gettempdir()
    except OSError:  # no usable temporary folder: the common default, as a name
        where = "/tmp"
    return shlex.quote(os.path.join(where, "headrace-bench"))


def prepare_root(root: str, flag: str = "--root", *, write: bool = True) -> str:
    """Create the dataset folder, or say why it cannot be used, before anything runs.

    ``write=False``: a folder that exists may be read-only (a network mount, a
    slowfs view): a run reads the datasets there and needs to write none if
    they are complete (see :func:`_generate`)."""
    if url_scheme(root) is not None:
        raise ConfigError(
            f"{flag} {root!r} is a URL; here it is a local folder. To read a dataset from "
            "S3 use --storage s3 --storage-url s3://BUCKET/PREFIX; to write one to an object "
            "store use 'headrace gen WORKLOAD --root URL'"
        )
    refuse_url_typo(flag, root)
    _refuse_unexpanded_home(flag, root)
    if os.path.exists(root) and not os.path.isdir(root):  # makedirs said "File exists"
        raise ConfigError(
            f"{flag} {root!r} is a file, not a folder: give the folder that holds (or is to "
            f"hold) the datasets, e.g. {flag} {_example_root()}"
        )
    try:
        os.makedirs(root, exist_ok=True)
    except OSError as exc:
        gone = gone_mount(root)  # a mount whose server was killed: "File exists" said
        if gone is not None:
            raise ConfigError(
                f"{flag} {root!r}: Transport endpoint is not connected: the mount it is on "
                f"is gone (its FUSE server or network file system driver stopped); unmount "
                f"it (fusermount3 -u {gone}, or umount -l {gone}) and mount it again"
            ) from None
        raise ConfigError(
            f"{flag} {root!r}: cannot create the dataset folder ({exc.strerror}); "
            f"choose a writable folder, e.g. {flag} {_example_root()}"
        ) from None
    if write and not os.access(root, os.W_OK):
        raise ConfigError(
            f"{flag} {root!r} is not writable; choose a writable folder, "
            f"e.g. {flag} {_example_root()}"
        )
    return root


def _generate(kind: Any, root: str, progress: Callable[[int, int], None], gen: str) -> None:
    """Write the kind's dataset under ``root`` unless it is there and complete; a
    read-only ``root`` whose dataset is not says what to do (``gen``: the command that
    writes it, with the run's sizes)."""
    try:
        kind.write(progress)
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM) or os.access(root, os.W_OK):
            raise
        name = kind.workload.name
        raise ConfigError(
            f"--root {root!r} is read-only and workload {name!r}'s dataset is missing or "
            f"incomplete there ({exc.strerror}: {exc.filename}): write it where the folder is "
            f"writable first ({gen} --root DIR), then point --root at DIR "
            "or a read-only view of it, such as a network mount"
        ) from None


def _demand(kind: Any, accelerators: int = 1) -> str:
    t = kind.workload.train
    rec = kind.record_bytes()
    b = kind.host_batch
    if t.computation_time <= 0:
        return f"batch {b} x {byte_size(rec)}/record; no compute (the loader alone)"
    d = b * rec / t.computation_time
    # With N accelerators the host must feed N times that (the JSON's demand_bytes_per_s):
    # the line gave the one accelerator's figure only, and tiny ones as "0.0 MB/s".
    total = f", x {accelerators} = {byte_size(accelerators * d)}/s" if accelerators > 1 else ""
    # Drawn record sizes: the demand is the dataset's mean's, and the YAML's mean asks more
    # or less; the line gave UNet3D's 2.89 GB/s alone, where a reader works out 3.18.
    drawn = drawn_records(kind)
    mean = ""
    if drawn is not None:
        here, asked = drawn
        at = d * asked / here
        mean = (
            f"; its records are drawn with a stdev and average {byte_size(here)} here, the "
            f"workload's mean {byte_size(asked)}: {byte_size(at)}/s at that"
            + (f", x {accelerators} = {byte_size(accelerators * at)}/s" if accelerators > 1 else "")
        )
    return (
        f"batch {b} x {byte_size(rec)}/record / {t.computation_time:g} s compute = "
        f"{byte_size(d)}/s per accelerator{total} (AU >= {t.au_threshold:.2f})"
        + mean
        + _stored_over_record(kind.workload, rec)
    )


def _per_request(kind: Any, record_scale: float, slowfs: SlowFSConfig | None) -> str | None:
    """Where --record-scale < 1 reads through a storage with a time per request (slowfs,
    S3): the files shrink, the requests' latency does not, so a scaled run understates the
    storage for the workload's own records; ``None`` elsewhere.

    Scaling the latency with the records was thought of and left: no storage answers a
    request for a hundredth of the bytes in a hundredth of the time (a round trip is one
    whatever it carries), so it would rehearse a storage that does not exist."""
    if record_scale >= 1:
        return None
    if slowfs is not None:
        paid = (
            f"slowfs's {slowfs.open_latency_ms:g} ms per open is paid once a file, whatever its "
            f"bytes (a READ's {slowfs.read_latency_ms:g} ms too, where a file is smaller than "
            "a READ)"
        )
    elif kind.store is not None and kind.store.remote:
        lat = kind.store.latency_ms
        paid = (
            f"each {kind.storage.upper()} request's round trip"
            + (f" (the proxy's {lat:g} ms among it)" if lat else "")
            + " is paid whole for fewer bytes"
        )
    else:
        return None
    return (
        f"{kind.workload.name}: --record-scale {record_scale:g} makes each file "
        f"{record_scale:g} of its bytes, not each request's time: {paid}, so a request costs "
        "more per byte than on the workload's own records, and this run's GB/s, AU and max "
        "acc. understate this storage for them (a latency scaled with the bytes would "
        "rehearse a storage that does not exist); --record-scale 1 with a smaller --scale "
        "keeps the workload's bytes per request"
    )


def _stored_over_record(wl: Workload, stored: float) -> str:
    """Where a --dlio workload's records are stored in far more bytes than asked (the
    format's own bytes outweigh a record scaled down): --record-scale scales the compute
    time with the record, so the demand is no longer the YAML's, and says so. UNet3D at
    --record-scale 1e-9 asked 9,947 GB/s per accelerator for its 3 GB/s without a word."""
    asked = wl.dataset.get("record_bytes")
    if not wl.description.startswith("DLIO ") or not isinstance(asked, int) or asked <= 0:
        return ""
    ratio = stored / asked
    if ratio < 1.5:
        return ""
    return (
        f"; but records are stored as {byte_size(stored)} for the {byte_size(asked)} asked "
        f"(the format's own bytes): {ratio:,.1f}x the YAML's demand, as the compute time "
        "scales with --record-scale; a larger --record-scale keeps it"
    )


def _plan(wl: Workload) -> str:
    """The steps each variant runs, and where they come from for a DLIO workload."""
    t = wl.train

    def n(count: int, what: str) -> str:
        return f"{count:,} {what}{'' if count == 1 else 's'}"

    # The runner always takes the first batch untimed (time to first batch): a
    # warm-up of 0 still warms one step, and the plan says so.
    warm = n(max(1, t.warmup_steps), "warm-up step")
    if t.warmup_steps < 1:
        warm += " (the first batch, timed apart as time to first batch; --warmup 0 takes it too)"
    elif wl.description.startswith("DLIO ") and t.warmup_steps == t.steps:
        warm += (
            " (an untimed epoch, so that the first trial begins as the later ones do: after "
            "the other variants ran one)"
        )
    out = f"plan: {warm}, then {n(t.trials, 'trial')} x {n(t.steps, 'step')} per variant"
    if t.computation_time > 0:
        # The warm-up epoch with compute runs too (au_epochs): the plan said the trials'
        # steps alone, an epoch a variant short of the run.
        out += (
            f", and {n((WARMUP_EPOCHS + t.trials) * t.steps, 'step')} with compute "
            f"({n(WARMUP_EPOCHS, 'warm-up epoch')} and {n(t.trials, 'trial')}, of "
            f"{n(t.steps, 'step')}: AU is the trials')"
        )
    if wl.description.startswith("DLIO "):
        out += f" ({wl.description})"
    return out


#: The longest a --dlio run takes from its YAML's own length (compute alone) unasked:
#: past it, --trials and --steps must both be given. megatron_deepspeed.yaml's 311,541
#: epochs began a run of 262 days at --scale 0.001 (72,000 years at 1) without a word.
LONG_RUN_S = 3600.0


def _duration(s: float) -> str:
    """``s`` seconds in plain words, whole units rounded down (a floor stays a floor;
    under 10 s, two figures)."""
    if s < 10:
        return f"{s:.2g} s"
    if s < 60:
        return f"{int(s)} s"
    m = int(s // 60)
    if m < 60:
        return f"{m} min" + (f" {int(s % 60)} s" if int(s % 60) else "")
    h = m // 60
    if h < 48:
        return f"{h} h" + (f" {m % 60} min" if m % 60 else "")
    if h < 2 * 8766:
        return f"{h // 24:,} days"
    return f"{h // 8766:,} years"


def _length(wl: Workload, auto: bool = False) -> str | None:
    """How long the run takes at the least, said before it starts: the compute alone,
    with its sums (the plan's step counts left a reader to multiply 84,116,070 steps by
    0.0899 s, and by the variants)."""
    t = wl.train
    if t.computation_time <= 0:
        return None
    n = len(wl.variants)
    trials = f"{t.trials:,} trial{'' if t.trials == 1 else 's'}"
    warm = f"{WARMUP_EPOCHS} warm-up epoch{'' if WARMUP_EPOCHS == 1 else 's'}"
    out = (
        f"takes at least {_duration(wl.compute_s)}: the compute alone, "
        f"{n} variant{'' if n == 1 else 's'} x ({warm} + {trials}) x {t.steps:,} steps x "
        f"{t.computation_time:g} s (the reads come on top)"
    )
    if auto:
        out += "; --accelerators auto's search adds about as long again for each count it tries"
    if wl.compute_s > LONG_RUN_S:
        out += "; --trials N and --steps N shorten it"
    return out


def _refuse_long_dlio(wl: Workload, args: argparse.Namespace) -> None:
    """Refuse a --dlio run whose YAML's own length (trials from ``train.epochs``, steps an
    epoch) takes past :data:`LONG_RUN_S` of compute alone, unless ``--trials`` and
    ``--steps`` are both given. DLIO runs what its YAML says, on the cluster the YAML
    describes; here one host sleeps every step of every variant, and a storage engineer
    typing the documented command would wait days for a report. Refused, not capped: a
    cap would report an AU over fewer epochs than the YAML's under its name, and the
    message costs one command (nothing is written yet)."""
    t = wl.train
    if not wl.description.startswith("DLIO ") or wl.compute_s <= LONG_RUN_S:
        return
    if args.trials is not None and args.steps is not None:
        return
    per_step = len(wl.variants) * t.computation_time
    w = WARMUP_EPOCHS  # each variant's warm-up epoch with compute, before its trials
    if (w + 1) * t.steps * per_step <= LONG_RUN_S:
        k = int(LONG_RUN_S // (t.steps * per_step)) - w
        shorter = (
            f"--trials {k} ({k:,} trials of {t.steps:,} steps and the warm-up epoch: at least "
            f"{_duration((w + k) * t.steps * per_step)})"
        )
    else:
        k = min(t.trials, 3)
        s = max(2, int(LONG_RUN_S // ((w + k) * per_step)))
        shorter = (
            f"--trials {k} --steps {s} (at least {_duration((w + k) * s * per_step)}; a "
            "smaller --record-scale shortens the compute with the records)"
        )
    raise ConfigError(
        f"{wl.source}: ({w} warm-up epoch + {t.trials:,} trials "
        f"({'--trials' if args.trials is not None else 'train.epochs'})) x {t.steps:,} steps "
        f"({'--steps' if args.steps is not None else 'an epoch each'}) x "
        f"{len(wl.variants)} variants take at least {_duration(wl.compute_s)} at the compute "
        f"time alone ({t.computation_time:g} s a step), past the {_duration(LONG_RUN_S)} a "
        f"--dlio run takes from its YAML unasked: give {shorter}, or a smaller --scale; "
        f"--trials {t.trials} --steps {t.steps} runs this length as it is"
    )


def list_workloads(root: str, kinds: list[Kind], accelerators: int = 1) -> int:
    """The built-in workloads, or ``kinds``: those ``-w``/``--dlio`` name (:func:`check`),
    with the demand of ``accelerators`` (``--list --accelerators 8`` gave one's alone,
    where the run says "x 8 = ...")."""
    from headrace.bench._workload import builtin_workloads

    if kinds:
        for kind in kinds:
            _list_one(kind.workload.name, kind.workload, _demand(kind, accelerators))
            # The plan alone, with how long it takes: --list runs nothing.
            print(f"{'':10s} {_plan(kind.workload)}")
            length = _length(kind.workload)
            if length is not None:
                print(f"{'':10s} {length}")
        return 0
    for name, wl in builtin_workloads().items():
        try:
            demand = _demand(make_kind(wl, root), accelerators)
        except HeadraceError as exc:
            demand = f"not runnable yet: {exc}"
        _list_one(name, wl, demand)
    from headrace.bench._dlio import builtin_dlio

    print(
        f"DLIO workloads (--dlio NAME, or a YAML of yours): {', '.join(builtin_dlio())}; "
        "--list --dlio NAME shows one's demand"
    )
    return 0


def _gen_command(wl: Workload, args: argparse.Namespace) -> str:
    """The ``headrace gen`` command (less ``--root``) that writes the dataset ``wl`` reads."""
    if args.dlio:
        return f"headrace gen --dlio {args.dlio}" + "".join(
            f" {flag} {getattr(args, attr)}"
            for flag, attr in (("--scale", "scale"), ("--record-scale", "record_scale"))
            if getattr(args, attr, None) is not None
        )
    changes = size_changes(wl, args)
    # A TOML file by its path; a built-in (source 'tokens.toml') by its name.
    named = wl.source if os.path.isfile(wl.source) else wl.name
    return f"headrace gen {named}" + "".join(
        f" {flag} {getattr(args, attr)}"
        for flag, attr in (("--files", "files"), ("--token-file-gib", "token_file_gib"))
        if attr in changes
    )


def _list_one(name: str, wl: Workload, demand: str) -> None:
    print(f"{name:10s} [{wl.kind}] {wl.description}")
    print(f"{'':10s} variants: {', '.join(wl.variants)}")
    print(f"{'':10s} demand: {demand}")


def _lines() -> Progress:
    """Progress into a file or pipe (a job's log): a line as each phase starts and at
    each tenth of it, as ``headrace check`` writes there; the plain bar wrote a
    carriage return and a redraw a step, all on one line, and rich's bar nothing at
    all (until 2026-12-07)."""
    last: list[Any] = ["", 0]

    def line(label: str, done: int, total: int) -> None:
        pct = 100 * done // max(1, total)
        if label != last[0] or pct >= last[1] + 10 or (pct == 100 and last[1] != 100):
            last[:] = [label, pct]
            print(f"{label}: {done}/{total}", file=sys.stderr, flush=True)

    return line


@contextmanager
def _progress(quiet: bool) -> Iterator[Progress | None]:
    if quiet:
        yield None
        return
    try:
        from rich.console import Console
        from rich.progress import BarColumn, TimeElapsedColumn
        from rich.progress import Progress as RichProgress
    except ImportError:
        if not sys.stderr.isatty():
            yield _lines()
            return

        def plain(label: str, done: int, total: int) -> None:
            print(f"\r{label}: {done}/{total}", end="", file=sys.stderr, flush=True)

        yield plain
        print(file=sys.stderr)
        return
    # Its own test of a terminal: FORCE_COLOR and TTY_COMPATIBLE say one is there.
    console = Console(stderr=True)
    if not console.is_terminal:
        yield _lines()
        return
    with RichProgress(
        "[progress.description]{task.description}",
        BarColumn(),
        "{task.completed}/{task.total}",
        TimeElapsedColumn(),
        transient=True,
        # stderr, as the plain bar: stdout is the result (the tables, gen's summary), and
        # rich wrote a blank line there when it was not a terminal.
        console=console,
    ) as bar:
        task = bar.add_task("starting", total=1)

        def update(label: str, done: int, total: int) -> None:
            bar.update(task, description=label, completed=done, total=total)

        yield update


def _is_compare(action: list[str]) -> bool:
    return len(action) == 3 and action[0] == "compare"


def _is_plot(action: list[str]) -> bool:
    return len(action) == 2 and action[0] == "plot"


#: What ``compare`` and ``plot`` take beside their reports (``plot``: and ``--plot``):
#: ``-q`` quiets what is quiet already; every other flag is a run's.
_ACTION_FLAGS = frozenset({"action", "quiet"})


def _refuse_run_flags(args: argparse.Namespace) -> None:
    """Refuse a run's flags given to ``compare`` or ``plot``, which run nothing: `bench
    compare A B --json X` and `bench plot R --plot P --json X` exited 0 without writing
    X (a script then read a stale report, as --list refuses --json for), and --steps and
    the like were dropped without a word."""
    parser = argparse.ArgumentParser(add_help=False)
    configure(parser)
    defaults = vars(parser.parse_args([]))
    # --max-slowdown, --max-au-drop: compare's, refused before elsewhere
    taken = (
        _ACTION_FLAGS
        | {"max_slowdown", "max_au_drop"}
        | ({"plot"} if _is_plot(args.action) else set())
    )
    given = [
        "--" + dest.replace("_", "-")  # each flag's dest is its long name
        for dest, value in vars(args).items()
        if dest not in taken and dest in defaults and value != defaults[dest]
    ]
    if not given:
        return
    action = args.action[0]
    what = "puts two reports side by side" if action == "compare" else "draws a report's plot"
    one = len(given) == 1
    named = given[0] if one else f"{', '.join(given[:-1])} and {given[-1]}"
    lost = ""
    if args.json:
        lost = f", so no report would be written to {'stdout' if args.json == '-' else args.json}"
    raise ConfigError(
        f"'{action}' {what} and runs nothing: {named} "
        f"{'is a flag' if one else 'are flags'} of a run{lost}; drop {'it' if one else 'them'}"
    )


#: The flags that take a text value, by their dests: each is tested as ``if args.x``.
_TEXT_FLAGS = ("root", "json", "plot", "dlio", "sweep", "storage_url", "endpoint")


def _refuse_empty(args: argparse.Namespace) -> None:
    """Refuse a flag given an empty value (``--root "$DATA"``, DATA unset): it read as the
    flag left out, so the datasets went to the default root, ``--json ""`` ran and wrote
    no report (exit 0), and ``--dlio ""`` ran the tokens workload."""
    for dest in _TEXT_FLAGS:
        if getattr(args, dest, None) == "":
            flag = "--" + dest.replace("_", "-")
            default = f" (default: {default_root()})" if dest == "root" else ""
            raise ConfigError(
                f"{flag} '' is empty (an unset shell variable?): give a value, or leave "
                f"{flag} out{default}"
            )


#: The flags that change the workloads a run reads (:func:`override`), by their dests.
_WORKLOAD_FLAGS = (
    "variants",
    "sweep",
    "steps",
    "trials",
    "warmup",
    "batch_size",
    "files",
    "token_file_gib",
    "storage",
    "storage_url",
    "endpoint",
    "latency_ms",
    "open_latency_ms",
    "max_concurrent",
)


def _refuse_changes_unlisted(args: argparse.Namespace) -> None:
    """Refuse, for ``--list`` without ``-w`` or ``--dlio``, the flags that change a
    workload: it lists the built-in ones as they ship, and `bench --list --variants nope`
    printed them all with their own variants, exit 0: the flag was dropped."""
    given = [
        "--" + dest.replace("_", "-")
        for dest in _WORKLOAD_FLAGS
        if getattr(args, dest, None) is not None
    ]
    if getattr(args, "store_option", None):
        given.append("--store-option")
    if not given:
        return
    one = len(given) == 1
    named = given[0] if one else f"{', '.join(given[:-1])} and {given[-1]}"
    raise ConfigError(
        f"--list without -w lists the built-in workloads as they ship; {named} "
        f"{'changes' if one else 'change'} the workloads a run reads: add -w NAME to list "
        "one as the run would read it (a run without -w reads tokens: headrace bench "
        f"--list -w tokens ...), or drop {'it' if one else 'them'}"
    )


def _kind(wl: Workload, root: str, variants: str | None) -> Kind:
    """:func:`make_kind`, its refusal of a variant ``--variants`` gave named by the flag:
    `-w tokens --variants naive,nope` said "tokens.toml: workload 'tokens': unknown
    variant 'nope'", of a file the command line never named."""
    try:
        return make_kind(wl, root)
    except ConfigError as exc:
        head = f"{wl.source}: "
        text = str(exc)
        rest = text.removeprefix(head)
        if variants is None or not wl.source or rest == text:
            raise
        if not rest.startswith(("variant ", f"workload {wl.name!r}: unknown variant ")):
            raise
        raise ConfigError(f"--variants {variants!r}: {rest}") from exc


def check(args: argparse.Namespace) -> list[Kind]:
    """What :func:`run` refuses before it reads a dataset or writes anything (it reads
    the workload and DLIO files named); the kinds of the workloads to run or list.

    Also :func:`headrace.cli.check`'s for ``headrace bench``: no dataset, output
    path or endpoint is touched, so a command line is checked anywhere.
    """
    _refuse_empty(args)
    for flag, value, what in (
        ("--max-slowdown", args.max_slowdown, "PCT"),
        ("--max-au-drop", args.max_au_drop, "POINTS"),
    ):
        if value is not None and not _is_compare(args.action):
            # A run ignored it: `bench --max-slowdown 5 --json b.json` gated nothing.
            raise ConfigError(
                f"{flag} is a flag of 'compare' (headrace bench compare A.json B.json "
                f"{flag} {what}), not of a run or a plot; drop it here and give it to compare"
            )
    if args.action:
        if _is_compare(args.action):
            if args.action[1] == args.action[2] == "-":
                raise ConfigError(
                    "compare - -: stdin holds one report; give the other as a file, e.g. "
                    "headrace bench --json - | headrace bench compare A.json -"
                )
            _refuse_run_flags(args)
            pct = args.max_slowdown
            if pct is not None and not 0 <= pct < 100:
                raise ConfigError(
                    f"--max-slowdown {pct:g}: a slowdown in percent, from 0 (fail on any "
                    "slowdown beyond the trials' spread) to under 100; e.g. --max-slowdown 5"
                )
            drop = args.max_au_drop
            if drop is not None and not 0 <= drop < 100:
                raise ConfigError(
                    f"--max-au-drop {drop:g}: a drop of AU in points (AU x 100), from 0 (fail "
                    "on any drop beyond the trials' spread) to under 100; e.g. --max-au-drop 5"
                )
            return []
        if _is_plot(args.action):
            if not args.plot:
                raise ConfigError(
                    f"plot {args.action[1]}: give the image to write with --plot, e.g. "
                    f"headrace bench plot {args.action[1]} --plot r.png"
                )
            _refuse_run_flags(args)
            return []
        raise ConfigError(
            f"got {' '.join(args.action)!r}; the only actions are "
            "'compare A.json B.json' (two reports written by --json) and "
            "'plot R.json --plot R.png' (a report's plot, without running again); "
            "to pick a workload use -w NAME"
        )
    root = args.root or default_root()
    # Refused with --list too: it lists the workloads a run with these options would run.
    check_ranges(args)
    refuse_url_typo("--root", root)
    refuse_scales_without_dlio(args)
    refuse_workloads_with_dlio(args)
    parse_accelerators(args.accelerators)
    if args.sweep:
        parse_sweep(args.sweep)
    storage_options(args)
    if args.list:
        for flag, value in (("--json", args.json), ("--plot", args.plot)):
            if value:  # listed and exited 0 without it: a script read a stale report
                raise ConfigError(
                    f"{flag} writes a run's report; --list runs nothing, so {value} would "
                    f"not be written: drop --list to run, or drop {flag} to list"
                )
        if args.workload or args.dlio:
            return [_kind(wl, root, args.variants) for wl in workloads(args)]
        _refuse_changes_unlisted(args)
        return []
    kinds = [_kind(wl, root, args.variants) for wl in workloads(args)]
    for kind in kinds:
        with naming(kind.workload):
            kind.check_run()
        _refuse_long_dlio(kind.workload, args)
    return kinds


def _on_local_s3(kind: Kind) -> bool:
    """Whether ``kind``'s run serves its dataset from a moto server it starts (S3, no
    ``--endpoint``, no gs:// or az:// URL)."""
    store = getattr(kind, "store", None)
    return store is not None and store.remote and not store.cloud and not store.endpoint


def run(args: argparse.Namespace) -> int:
    root = args.root or default_root()
    if _is_compare(args.action):
        from headrace.bench._compare import MAX_AU_DROP, MAX_SLOWDOWN, compare

        try:
            check(args)
            pct = MAX_SLOWDOWN if args.max_slowdown is None else args.max_slowdown
            drop = MAX_AU_DROP if args.max_au_drop is None else args.max_au_drop
            return compare(args.action[1], args.action[2], pct, drop)
        except HeadraceError as exc:
            print(f"headrace bench compare: {exc}", file=sys.stderr)
            return 2
    try:
        kinds = check(args)
        if _is_plot(args.action):
            from headrace.bench._plot import plot_file

            plot_file(args.action[1], args.plot)
            print(f"wrote {args.plot} from {args.action[1]}", file=sys.stderr)
            return 0
    except (HeadraceError, ValueError, OSError) as exc:
        print(f"headrace bench: {exc}", file=sys.stderr)
        return 2
    if args.list:
        return list_workloads(root, kinds, parse_accelerators(args.accelerators) or 1)
    try:
        acc = parse_accelerators(args.accelerators)
        auto, n_acc = acc is None, acc or 1
        inputs = [p for p in [args.dlio, *(args.workload or [])] if p and os.path.isfile(p)]
        # --json -: the report on stdout (a file named '-' was written, and a script's
        # `--json - | jq` read the tables).
        json_file: str | None = args.json if args.json != "-" else None
        if json_file:
            check_output_path("--json", json_file)
        if args.plot:
            check_output_path("--plot", args.plot)
        for flag, out in (("--json", json_file), ("--plot", args.plot)):
            # `-w w.toml --json w.toml` wrote the report over the workload file.
            for source in inputs if out else ():
                refuse_output_over_input(flag, str(out), source, ())
        if args.plot:
            if json_file and os.path.realpath(json_file) == os.path.realpath(args.plot):
                # The plot was written over the report, after the run: the JSON was lost.
                raise ConfigError(
                    f"--json {args.json!r} and --plot {args.plot!r} are the same file: the plot "
                    "would replace the report; give each its own, e.g. --json r.json --plot r.png"
                )
            from headrace.bench._plot import check_plot_path

            check_plot_path(args.plot)
        # Served from S3, a run keeps upload digests and object caches under the root.
        prepare_root(root, write=any(k.store is not None and k.store.remote for k in kinds))
        # Every workload's missing bytes at once, before the first is written: a run whose
        # third dataset does not fit should not fill the disk with the first two first.
        # By a lower bound first: a --scale 1 DLIO dataset of 524,288 files took 15 s to
        # count before its refusal, and --scale 1e9 never ended counting.
        room_for(root, kinds)
        if any(_on_local_s3(k) for k in kinds):
            # Before the dataset is written (67 MB for tokens), not once it is to be served.
            from headrace.emulate._s3 import refuse_missing_moto

            refuse_missing_moto()
        slowfs = slowfs_config(args)
        if slowfs is not None:
            fuse_check()
    except (HeadraceError, ValueError, OSError) as exc:
        print(f"headrace bench: {exc}", file=sys.stderr)
        return 2
    # Said before the run and kept in its report: its AU and max acc. are read there.
    per_request: dict[str, str] = {}
    for kind in kinds:
        print(f"{kind.workload.name}: {_demand(kind, n_acc)}", file=sys.stderr)
        print(f"{kind.workload.name}: {_plan(kind.workload)}", file=sys.stderr)
        length = _length(kind.workload, auto)
        if length is not None:
            print(f"{kind.workload.name}: {length}", file=sys.stderr)
        said = _per_request(kind, args.record_scale or 1.0, slowfs)
        if said is not None:
            per_request[kind.workload.name] = said
            print(said, file=sys.stderr)
    report: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "command": ["headrace", "bench", *sys.argv[2:]] if sys.argv[1:2] == ["bench"] else None,
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "root": os.path.abspath(root),
        "sweep": args.sweep,
        "workloads": [],
        "results": [],
        "notes": [],
        "interrupted": False,
    }
    t0 = time.perf_counter()
    errors: list[str] = []  # workloads that could not be measured: the others still are
    stopped: BaseException | None = None  # Ctrl-C or SIGTERM after a workload was measured
    with _progress(args.quiet) as progress:
        for i, kind in enumerate(kinds):
            if progress:
                progress(f"{kind.workload.name}: dataset", 0, 1)

            def gen_progress(done: int, total: int, name: str = kind.workload.name) -> None:
                if progress:
                    progress(f"{name}: dataset (MB)", done // 10**6, total // 10**6)

            try:
                _generate(kind, root, gen_progress, _gen_command(kind.workload, args))
                summary, results = run_workload(
                    kind,
                    options=RunOptions(
                        isolate=not args.no_isolate,
                        accelerators=n_acc,
                        accelerators_auto=auto,
                        slowfs=slowfs,
                        sweep_key=parse_sweep(args.sweep)[0] if args.sweep else None,
                    ),
                    progress=progress,
                )
            except (HeadraceError, OSError) as exc:  # OSError: a full disk, a folder removed
                name = kind.workload.name
                said = str(exc) if isinstance(exc, HeadraceError) else f"{name}: {exc}"
                errors.append(f"headrace bench: {said}")
                print(errors[-1], file=sys.stderr)
                # In the report too: the JSON of a run whose second workload failed held
                # the first alone, without a word of the other (the run exited 2).
                report["notes"].append(f"{name}: not measured: {said}")
                continue
            except Interrupted as part:
                # Its variants with a trial done are reported, with the workloads before it.
                if kind.workload.name in per_request:
                    part.summary["notes"].append(per_request[kind.workload.name])
                report["workloads"].append(part.summary)
                report["notes"].extend(part.summary["notes"])
                report["results"].extend(part.results)
                report["interrupted"] = True
                stopped = part.cause
                left = ", ".join(k.workload.name for k in kinds[i + 1 :])
                if left:
                    report["notes"].append(
                        f"interrupted ({stop_name(part.cause)}): not measured: {left}"
                    )
                break
            except (KeyboardInterrupt, SystemExit) as exc:
                # The workloads measured before it are reported and written, then the
                # interrupt goes on (exit 130 or 143): they were lost with the rest.
                left = ", ".join(k.workload.name for k in kinds[i:])
                how = stop_name(exc)
                if not report["results"]:
                    # A bare "interrupted" left a script looking for the --json file.
                    wrote = f"; no report written to {args.json}" if args.json else ""
                    print(
                        f"headrace bench: interrupted ({how}) after "
                        f"{time.perf_counter() - t0:.1f} s: not measured: {left} (a variant's "
                        f"figures come once its measurement pass and a trial are done; a files "
                        f"workload's once a fresh pass is){wrote}",
                        file=sys.stderr,
                    )
                    raise
                stopped = exc
                report["interrupted"] = True
                report["notes"].append(f"interrupted ({how}): not measured: {left}")
                break
            if kind.workload.name in per_request:
                summary["notes"].append(per_request[kind.workload.name])
            report["workloads"].append(summary)
            report["notes"].extend(summary["notes"])
            report["results"].extend(results)
    if not report["results"]:
        # Nothing measured: each workload's error is printed above. Said of --json too, as
        # an interrupted run says it: a file there from an earlier run was read as this one's.
        if args.json:
            where = "stdout" if args.json == "-" else args.json
            print(
                f"headrace bench: nothing measured; no report written to {where}", file=sys.stderr
            )
        return 2
    report["elapsed_s"] = time.perf_counter() - t0
    report["machine"] = machine_info(root)
    # The files first, then the tables: `headrace bench --json r.json | head` ended the
    # run on a broken pipe while printing, before the report was written.
    lost: OSError | None = None
    try:
        if args.json and args.json != "-":
            write_json(report, args.json)
        if args.plot:
            from headrace.bench._plot import plot_report

            plot_report(report, args.plot, sweep=args.sweep)
    except OSError as exc:
        lost = exc
    print_report(report, file=sys.stderr if args.json == "-" else None)
    if args.json == "-":
        print(report_json(report))  # strict JSON, as the file's
    if lost is not None:
        # The figures are printed above; say which output was lost and why.
        print(
            f"headrace bench: could not write {lost.filename or 'output'}: {lost}", file=sys.stderr
        )
        return 2
    if stopped is not None:
        raise stopped
    bad = [g for w in report["workloads"] for g in w["mismatches"]]
    if bad:
        for w in report["workloads"]:
            if w["mismatches"]:
                groups = " vs ".join("[" + ", ".join(g) + "]" for g in w["mismatches"])
                print(
                    f"headrace bench: digests differ in workload {w['name']!r}: {groups}",
                    file=sys.stderr,
                )
    # Said last, after the figures: a variant or workload that failed makes the run exit 2.
    for w in report["workloads"]:
        for f in w.get("failed", ()):
            name, _, why = f["error"].partition(f" of workload {w['name']!r}: ")
            line = f"headrace bench: {name} of workload {w['name']!r} failed: {why}"
            print(line, file=sys.stderr)
    for line in errors:
        print(line, file=sys.stderr)
    if errors or any(w.get("failed") for w in report["workloads"]):
        return 2
    return 1 if bad else 0
