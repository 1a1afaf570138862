"""Run mutated cases of one target in child processes and check the bad-input invariant.

The invariant (DESIGN.md, invariant 2): a mutated file reads as the exact same bytes as
the pristine one, or fails with a :class:`headrace.errors.HeadraceError` whose message
names the file; never another exception type, a crash, a hang or a huge allocation.
Strict cases (truncations) may not read as other data either; the rest may, where no
checksum covers the bytes that changed.
"""

from __future__ import annotations

import itertools
import json
import os
import select
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _mutate import Case
from _targets import S3_ENV, TARGETS

CHILD = Path(__file__).with_name("_child.py")
SRC = Path(__file__).resolve().parents[2] / "src"


@dataclass(frozen=True)
class Result:
    case: Case
    outcome: dict[str, Any]


@dataclass(frozen=True)
class Bucket:
    """Where remote targets' cases go: a bucket of an S3 endpoint (moto), a boto3 client
    for a test's own objects, and the :class:`headrace.io.ObjectStore` options that read
    and write it."""

    name: str
    client: Any
    options: dict[str, Any]


_uploads = itertools.count()


def _upload(bucket: Bucket, target: str, dirs: list[Path]) -> str:
    """Put every file of every case folder under ``fuzz/<target>-<n>/NNNN/``; the base URL."""
    from concurrent.futures import ThreadPoolExecutor

    from headrace.io import ObjectStore

    prefix = f"fuzz/{target}-{next(_uploads)}"
    root = dirs[0].parent  # every case folder is root/NNNN
    files = [p for d in dirs for p in sorted(d.rglob("*")) if p.is_file()]
    # headrace's store rather than boto3: a fifth of boto3's CPU for the same PUTs (0.16
    # against 0.76 s for 200 files, 2c), and the suite is CPU-bound. Eight at once: one
    # PUT at a time took a third of a target's run.
    with ObjectStore(f"s3://{bucket.name}", **bucket.options) as store:
        with ThreadPoolExecutor(8) as pool:
            list(
                pool.map(
                    lambda f: store.put_file(f"{prefix}/{f.relative_to(root).as_posix()}", f), files
                )
            )
    return f"s3://{bucket.name}/{prefix}"


def _lay_out(target: str, cases: list[Case], root: Path) -> list[Path]:
    t = TARGETS[target]
    dirs = []
    for i, case in enumerate(cases):
        d = root / f"{i:04d}"
        d.mkdir(parents=True)
        t.companions(d)
        (d / t.file).write_bytes(case.data)
        dirs.append(d)
    return dirs


def run_cases(
    target: str,
    cases: list[Case],
    root: Path,
    *,
    timeout_s: float = 30,
    bucket: Bucket | None = None,
) -> list[Result]:
    """Read every case in a child process; a case that crashes or hangs is one outcome.

    A remote target's cases are uploaded to ``bucket`` first; the child reads them from
    there, told where by ``HEADRACE_FUZZ_S3``."""
    pristine = Case(label="pristine", data=TARGETS[target].pristine(), strict=True)
    cases = [pristine, *cases]
    dirs = _lay_out(target, cases, root)
    outcomes: dict[int, dict[str, Any]] = {}
    path = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    env = {**os.environ, "PYTHONPATH": path}
    if TARGETS[target].remote:
        assert bucket is not None, f"{target} reads from object storage: pass a bucket"
        base = _upload(bucket, target, dirs)
        env[S3_ENV] = json.dumps({"base": base, "options": bucket.options})
    first = 0
    while first < len(cases):
        proc = subprocess.Popen(
            [sys.executable, str(CHILD), target, str(root), str(first)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        assert proc.stdout is not None
        current = first
        deadline = time.monotonic() + timeout_s + 10  # the first case pays for imports
        buf = b""
        while True:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([proc.stdout], [], [], max(0.0, left))
            if not ready:
                proc.kill()
                proc.wait()
                outcomes[current] = {"kind": "timeout", "after_s": timeout_s}
                first = current + 1
                break
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                rc = proc.wait()
                _, err = proc.communicate()
                if current not in outcomes:
                    tail = err.decode(errors="replace")[-1500:]
                    outcomes[current] = {"kind": "crash", "returncode": rc, "stderr": tail}
                first = current + 1
                break
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                msg = json.loads(line)
                if "start" in msg:
                    current = msg["start"]
                    deadline = time.monotonic() + timeout_s
                else:
                    outcomes[msg.pop("case")] = msg
        if len(outcomes) == len(cases):
            break
    return [Result(c, outcomes[i]) for i, c in enumerate(cases)]


def violations(target: str, results: list[Result]) -> list[str]:
    """What broke the invariant, one line a case; empty when every case held it."""
    t = TARGETS[target]
    pristine = results[0].outcome
    assert pristine["kind"] == "ok", f"{target}: the pristine file does not read: {pristine}"
    bad = []
    for i, r in enumerate(results[1:], start=1):
        o = r.outcome
        # A remote case's error names its object's URL, which ends in the case's folder.
        name = f"/{i:04d}/{t.file}" if t.remote else Path(t.file).name
        if o["kind"] == "ok":
            if r.case.strict and o["digest"] != pristine["digest"]:
                bad.append(f"{r.case.label}: read as other data without an error")
        elif o["kind"] == "error":
            named = name in o["message"] and (not t.remote or "s3://" in o["message"])
            if t.names_file and not named:
                bad.append(f"{r.case.label}: {o['type']} does not name {name}: {o['message']}")
        else:
            bad.append(f"{r.case.label}: {json.dumps(o)}")
    return bad


def summary(results: list[Result]) -> Counter[str]:
    """Outcome counts: ``same``, ``other`` (other valid data), ``error:Type``, ..."""
    pristine = results[0].outcome.get("digest")
    out: Counter[str] = Counter()
    for r in results[1:]:
        o = r.outcome
        if o["kind"] == "ok":
            out["same" if o["digest"] == pristine else "other"] += 1
        elif o["kind"] == "error":
            out[f"error:{o['type']}"] += 1
        else:
            out[o["kind"]] += 1
    return out


def check(
    target: str, cases: list[Case], root: Path, *, bucket: Bucket | None = None
) -> Counter[str]:
    """Run ``cases`` and fail, listing every violation, unless all held the invariant."""
    results = run_cases(target, cases, root, bucket=bucket)
    bad = violations(target, results)
    head = f"{target}: {len(bad)} of {len(cases)} cases broke the invariant:"
    assert not bad, "\n".join([head, *bad])
    seen = summary(results)
    log = os.environ.get("HEADRACE_FUZZ_LOG")
    if log:  # what each run saw, for a report: outcomes by kind, per target
        with open(log, "a") as f:
            f.write(json.dumps({"target": target, "cases": len(cases), **seen}) + "\n")
    return seen
