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


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [sys.executable, "-m", "headrace", "bench", "--list", *argv],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


def test_cli_regressions(tmp_path: Path) -> None:
    # Minimal cases the fuzzing found, run as a user runs them: each was a traceback
    # (UnicodeDecodeError, RecursionError, OverflowError), a message of several lines
    # (PyYAML's), one that did not name the file, or a run that never ended.
    dlio = TARGETS["dlio_yaml"].pristine()
    toml = TARGETS["bench_toml"].pristine()
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
        flag = "--dlio" if name.endswith(".yaml") else "-w"
        done = _cli(flag, str(tmp_path / name))
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (name, done.stderr)
        assert len(lines) == 1 and "Traceback" not in done.stderr, (name, done.stderr)
        assert lines[0].startswith(f"headrace bench: {tmp_path / name}"), (name, lines[0])
        assert message in lines[0], (name, lines[0])
