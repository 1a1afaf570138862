"""Bench workload TOML, DLIO YAML (through the CLI) and a loader's saved state, tampered."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import tomllib
from pathlib import Path

import yaml
from _harness import SRC, check
from _mutate import (
    BAD_JSON_VALUES,
    BAD_TOML_VALUES,
    Case,
    flips,
    json_cases,
    structured_cases,
    toml_text,
    truncations,
)
from _targets import TARGETS


def _text_cases(data: bytes) -> list[Case]:
    # A config cut at a line end is another valid config: cuts need only fail cleanly.
    cuts = [
        dataclasses.replace(c, strict=False) for c in truncations(data, range(0, len(data), 37))
    ]
    odd = [b"\xff\xfe" + data, b"[" * 100_000, b"\x00" * 64]
    return (
        cuts
        + flips(data, seed=11, count=60)
        + [Case(label=f"odd{i}", data=d, strict=True) for i, d in enumerate(odd)]
    )


def test_bench_workload_toml(tmp_path: Path) -> None:
    data = TARGETS["bench_toml"].pristine()
    doc = tomllib.loads(data.decode())
    cases = structured_cases(doc, toml_text, BAD_TOML_VALUES, extra={"zz": 1}) + _text_cases(data)
    seen = check("bench_toml", cases, tmp_path)
    assert seen["error:ConfigError"] > len(cases) // 2


def test_dlio_yaml(tmp_path: Path) -> None:
    data = TARGETS["dlio_yaml"].pristine()
    values = [*BAD_JSON_VALUES, float("nan"), float("inf")]
    cases = structured_cases(
        yaml.safe_load(data), lambda d: yaml.safe_dump(d).encode(), values, extra={"zz": 1}
    )
    cases += _text_cases(data)
    seen = check("dlio_yaml", cases, tmp_path)
    assert seen["error:ConfigError"] > len(cases) // 3


def test_loader_state(tmp_path: Path) -> None:
    # load_state_dict takes a dict: every value retyped (negative, huge, wrong types),
    # every key deleted, a key added, other plan versions.
    data = TARGETS["state"].pristine()
    state = json.loads(data)
    values = [*BAD_JSON_VALUES, -(2**63), 2**64, 2**1000, 1e308]
    cases = [
        c
        for c in json_cases(data, values)
        if c.label not in ("not utf-8", "empty", "nested", "NaN")
    ]
    cases += [
        Case(label=f"version {v}", data=json.dumps({**state, "version": v}).encode(), strict=True)
        for v in (1, 3, 99)
    ]
    seen = check("state", cases, tmp_path)
    assert seen["error:StateError"] > len(cases) // 2


# `python -m headrace bench --list ARGS...` for each ARGS in turn, in one interpreter: the
# module run as -m runs it, fd 2 a file of its own (ARGS' last part, then .stderr), an
# escaping exception's traceback printed there as the interpreter would. The exit codes.
_RUNS = r"""
import json, os, runpy, sys, traceback
codes = []
for argv, err in json.loads(sys.argv[1]):
    fd = os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    saved = os.dup(2)
    os.dup2(fd, 2)
    os.close(fd)
    sys.argv = ["-m", "bench", "--list", *argv]
    try:
        runpy.run_module("headrace", run_name="__main__", alter_sys=True)
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if isinstance(exc.code, str):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        code = 1
    sys.stderr.flush()
    os.dup2(saved, 2)
    os.close(saved)
    codes.append(code)
print(json.dumps(codes))
"""


def _cli_runs(argvs: list[list[str]], tmp_path: Path) -> list[int]:
    runs = [[argv, str(tmp_path / f"{Path(argv[-1]).name}.stderr")] for argv in argvs]
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [sys.executable, "-c", _RUNS, json.dumps(runs)],
        capture_output=True,
        text=True,
        env=env,
        timeout=60 * len(runs),
        check=False,
    )
    assert done.returncode == 0, done.stderr
    codes: list[int] = json.loads(done.stdout.strip().splitlines()[-1])
    return codes


def test_cli_regressions(tmp_path: Path) -> None:
    # Minimal cases the fuzzing found, run as a user runs them: each was a traceback
    # (UnicodeDecodeError, RecursionError, OverflowError), a message of several lines
    # (PyYAML's), one that did not name the file, or a run that never ended.
    dlio = TARGETS["dlio_yaml"].pristine()
    toml = TARGETS["bench_toml"].pristine()
    cases: list[tuple[str, str]] = []
    for name, data, message in [
        ("a.yaml", b"\xff" + dlio, "not valid YAML"),
        ("b.yaml", b"[" * 100_000, "not valid YAML"),
        ("c.yaml", dlio.replace(b"  format: npz", b"  format: npz\n x"), "not valid YAML"),
        (
            "d.yaml",
            dlio.replace(b"record_length_bytes: 1", b"record_length_bytes: .inf #"),
            "at most 2**53",
        ),
        (
            "e.yaml",
            dlio.replace(b"num_files_train: 168", b"num_files_train: 9223372036854775808"),
            "at most 2**53",
        ),
        ("f.toml", b"\xff" + toml, "not valid TOML"),
        (
            "g.toml",
            toml.replace(b'kind = "files"', b'kind = "filez"'),
            "unknown workload kind 'filez'",
        ),
        ("h.toml", toml.replace(b"files = 16", b"files = inf"), "files must be a finite number"),
        ("i.toml", toml.replace(b"files = 16", b"files = 9223372036854775807"), "at most 2**53"),
        ("j.toml", toml.replace(b"files = 16", b'files = "16"'), "files must be a number"),
        (
            "k.toml",
            toml.replace(b"in_flight = 4", b"in_flight = inf"),
            "in_flight must be a whole number >= 1; got inf",
        ),
    ]:
        (tmp_path / name).write_bytes(data)
        cases.append((name, message))
    # All in one process (one start and import, not 11: 4 s of CPU less, 2c), each as
    # `python -m headrace` runs it, its stderr caught at file descriptor 2.
    argv = [["--dlio" if n.endswith(".yaml") else "-w", str(tmp_path / n)] for n, _ in cases]
    codes = _cli_runs(argv, tmp_path)
    for (name, message), code in zip(cases, codes, strict=True):
        stderr = (tmp_path / f"{name}.stderr").read_text()
        lines = stderr.strip().splitlines()
        assert code == 2, (name, stderr)
        assert len(lines) == 1 and "Traceback" not in stderr, (name, stderr)
        assert lines[0].startswith(f"headrace bench: {tmp_path / name}"), (name, lines[0])
        assert message in lines[0], (name, lines[0])
