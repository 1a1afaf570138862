"""Workload settings and variant options a run cannot use are refused as the workload is
read: before any dataset is generated, by ``bench --list`` and ``headrace.cli.check()``
too, naming the file's key or the variant option as the user wrote it."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from headrace.bench._kind import kind_class, make_kind
from headrace.bench._runner import mismatches
from headrace.bench._workload import builtin_workloads, load_workload
from headrace.cli import check, command_parser, main
from headrace.errors import ConfigError

#: A run small enough to measure in a moment (a 1 MiB token file).
TINY = ["--token-file-gib", "0.001", "--steps", "2", "--trials", "1", "--warmup", "0", "-q"]


def _tokens_file(tmp_path: Path, old: str, new: str) -> str:
    """The built-in tokens.toml with ``old`` replaced by ``new``, at ``tmp_path/w.toml``."""
    text = (resources.files("headrace.bench") / "workloads" / "tokens.toml").read_text()
    assert old in text, old
    path = tmp_path / "w.toml"
    path.write_text(
        text.replace(old, new).replace("token_file_gib = 1.0", "token_file_gib = 0.001")
    )
    return str(path)


def _refused_before_generating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    """``headrace.cli.check()``, ``bench`` and (given a workload file) ``bench --list`` on
    ``argv`` each refuse it in one line holding ``said``, and nothing is written."""
    root = tmp_path / "root"
    args = command_parser("bench").parse_args([*argv, "--root", str(root)])
    with pytest.raises(ConfigError) as got:
        check("bench", args)
    assert said in str(got.value)
    runs = [[*argv, *TINY]] + ([[*argv, "--list"]] if "-w" in argv else [])
    for run in runs:
        assert main(["bench", *run, "--root", str(root)]) == 2, run
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and said in err and "Traceback" not in err, (run, err)
    assert not root.exists() or not any(root.iterdir())  # nothing generated


# -- [train]: numbers that are not finite -----------------------------------------------


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("computation_time", "inf"),
        ("computation_time", "nan"),
        ("computation_time", "-inf"),
        ("computation_time_stdev", "nan"),
        ("computation_time_stdev", "inf"),
    ],
)
def test_a_train_time_that_is_not_finite_is_refused_when_the_file_is_read(
    tmp_path: Path, key: str, value: str
) -> None:
    # Until 2026-12-06 only "< 0" was checked: inf ended the run in time.sleep's
    # OverflowError after generating and measuring, a NaN stdev in its ValueError, and
    # computation_time = nan ran ("nan s compute"), writing a bare NaN into the report.
    line = (
        f"{key} = {value}"
        if key == "computation_time"
        else f"computation_time = 0.01\n{key} = {value}"
    )
    path = _tokens_file(tmp_path, "computation_time = 0.0", line)
    with pytest.raises(ConfigError, match=rf"w\.toml: train: {key} must be a finite number; got"):
        load_workload(path)


def test_a_nan_computation_time_is_refused_by_the_cli_before_anything_is_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _tokens_file(tmp_path, "computation_time = 0.0", "computation_time = nan")
    _refused_before_generating(
        tmp_path, capsys, ["-w", path], "train: computation_time must be a finite number; got nan"
    )


# -- tokens [dataset] ----------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "int8", "uint64", ">u4"])
def test_a_token_dtype_the_reader_does_not_take_is_refused_before_generating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], dtype: str
) -> None:
    # Until 2026-12-06 float32 ended in a traceback from the generator (bench and gen),
    # and int8 and uint64 were refused by the reader once the whole token file (1 GiB by
    # default) was written; --list accepted them all.
    path = _tokens_file(tmp_path, 'dtype = "uint32"', f'dtype = "{dtype}"')
    said = f"w.toml [dataset]: dtype = '{dtype}' is not a token type the reader takes: give "
    _refused_before_generating(tmp_path, capsys, ["-w", path], said)
    assert main(["gen", path, "--root", str(tmp_path / "root"), "-q"]) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("dtype", ["uint16", "int32"])
def test_the_token_dtypes_the_reader_takes_are_accepted(tmp_path: Path, dtype: str) -> None:
    wl = builtin_workloads()["tokens"].replace(dataset={"dtype": dtype, "token_file_gib": 0.001})
    assert make_kind(wl, str(tmp_path)).dtype.name == dtype  # type: ignore[attr-defined]


@pytest.mark.parametrize("value", ["10.5", "0", "-3"])
def test_a_context_that_is_not_a_whole_number_above_0_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], value: str
) -> None:
    # Until 2026-12-06 int() read 10.5 as 10 (samples of 11 tokens, exit 0), and 0 was
    # refused after the token file was written, as "context must be a positive integer"
    # naming neither the file nor the key.
    path = _tokens_file(tmp_path, "context = 1024", f"context = {value}")
    said = f"w.toml [dataset]: context must be a whole number >= 1; got {value}"
    _refused_before_generating(tmp_path, capsys, ["-w", path], said)


# -- tokens [reader] -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ("block_mib = 4", "block_mib = 0", "[reader]: block_mib must be a whole number of 4 KiB "
         "pages, > 0 (a multiple of 1/256 MiB, e.g. 4, 0.25 or 0.00390625); got 0"),
        ("block_mib = 4", "block_mib = 0.001", "[reader]: block_mib must be a whole number of 4 "
         "KiB pages"),
        ("window_mib = 256", "window_mib = 0", "[reader]: window_mib must be > 0; got 0"),
        ("window_mib = 256", "window_mib = 0.001", "[reader]: window_mib = 0.001 cannot hold one "
         "sample: context + 1 = 1025 uint32 tokens take 4100 bytes; give window_mib >= 0.004"),
    ],
)  # fmt: skip
def test_token_windows_and_blocks_the_reader_cannot_read_are_refused_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], old: str, new: str, said: str
) -> None:
    # Until 2026-12-06 refused by TokenSource once the token file was written, naming its
    # own arguments: "block_bytes must be a multiple of 4096 (got 0)".
    path = _tokens_file(tmp_path, old, new)
    _refused_before_generating(tmp_path, capsys, ["-w", path], f"w.toml {said}")


def test_an_infinite_token_file_size_is_refused_not_a_traceback(tmp_path: Path) -> None:
    # Until 2026-12-06: int()'s OverflowError, a traceback (--token-file-gib inf was refused).
    wl = builtin_workloads()["tokens"].replace(dataset={"token_file_gib": float("inf")})
    with pytest.raises(ConfigError, match=r"token_file_gib must be a finite number > 0; got inf"):
        make_kind(wl, str(tmp_path))


# -- variant options -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--variants", "headrace-sync?nokey=1"],
         "--variants 'headrace-sync?nokey=1': variant 'headrace-sync?nokey=1': unknown option "
         "'nokey'; nothing reads "
         "it"),
        (["--variants", "headrace-sync?prefetch=abc"],
         "variant 'headrace-sync?prefetch=abc': prefetch='abc' is not a number, as the reader's "
         "prefetch is (8)"),
        (["--sweep", "prefetch=1,x"],
         "variant 'naive?prefetch=x': prefetch='x' is not a number"),
        (["--variants", "headrace-sync?block_mib=0"],
         "--variants 'headrace-sync?block_mib=0': variant 'headrace-sync?block_mib=0': block_mib "
         "must be a whole number of "
         "4 KiB pages"),
        (["--variants", "headrace-async?prefetch=-1"],
         "--variants 'headrace-async?prefetch=-1': variant 'headrace-async?prefetch=-1': "
         "prefetch must be a whole number >= "
         "0; got -1"),
        (["--variants", "headrace-sync?reads=mmap"],
         "variant 'headrace-sync?reads=mmap': reads must be 'populate' or 'pread' (got 'mmap')"),
        (["--variants", "headrace-sync?chunk_steps=0"],
         "variant 'headrace-sync?chunk_steps=0': chunk_steps must be >= 1 (got 0)"),
        (["--variants", "naive?reads=pread"],
         "variant 'naive?reads=pread': unknown option 'reads'"),
        (["--variants", "naive?seed=x"], "variant 'naive?seed=x': seed='x' is not an integer"),
        (["--variants", "naive?seed=-1"],
         "variant 'naive?seed=-1': seed must be in [0, 2**63) (got -1)"),
    ],
)  # fmt: skip
def test_a_variant_option_a_run_cannot_use_is_refused_before_generating(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    # Until 2026-12-06 a variant's options were checked as it opened, inside the run:
    # check() and --list accepted them, and a run wrote the whole token file, then exited 2.
    _refused_before_generating(tmp_path, capsys, argv, said)


def test_a_variant_option_in_a_workload_file_is_refused_by_list(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _tokens_file(tmp_path, '"headrace-async",', '"headrace-async?in_flght=4",')
    said = "w.toml: variant 'headrace-async?in_flght=4': unknown option 'in_flght'"
    _refused_before_generating(tmp_path, capsys, ["-w", path], said)


def test_the_options_variants_take_still_pass_the_checks(tmp_path: Path) -> None:
    specs = (
        "naive?block_mib=1&seed=3",
        "headrace-sync?reads=pread&chunk_steps=4&window_mib=16",
        "headrace-async?prefetch=2&block_mib=0.25",
        "memcpy?window_mib=8",
    )
    wl = builtin_workloads()["tokens"].replace(dataset={"token_file_gib": 0.001}, variants=specs)
    kind = make_kind(wl, str(tmp_path))
    kind.write()
    for spec in specs:  # and open as before
        stream = kind.open(spec, 1)
        assert next(iter(stream))["x"].shape == (32, 1024)
        stream.close()


@pytest.mark.parametrize(
    ("name", "spec", "said"),
    [
        ("npz", "headrace?in_flight=0", "npz.toml: variant 'headrace?in_flight=0': in_flight must "
         "be a whole number >= 1; got 0"),
        ("npz", "headrace?preprocess_time=-1", "npz.toml: variant 'headrace?preprocess_time=-1': "
         "workload 'npz': preprocess_time and preprocess_time_stdev must be >= 0"),
        ("padded", "headrace?max_gap=2.5", "padded.toml: variant 'headrace?max_gap=2.5': max_gap "
         "must be a whole number >= 0; got 2.5"),
        ("packed", "headrace-sync?block_mib=0", "packed.toml: variant 'headrace-sync?block_mib=0':"
         " block_mib must be a whole number of 4 KiB pages"),
    ],
)  # fmt: skip
def test_other_kinds_refuse_their_variants_options_as_the_workload_is_read(
    tmp_path: Path, name: str, spec: str, said: str
) -> None:
    wl = builtin_workloads()[name]
    for module, _ in kind_class(wl.kind).extras:
        pytest.importorskip(module)
    with pytest.raises(ConfigError) as got:
        make_kind(wl.replace(variants=(spec,)), str(tmp_path))
    assert said in str(got.value)


# -- the other kinds' whole numbers and times ----------------------------------------


@pytest.mark.parametrize(
    ("name", "section", "key", "value", "said"),
    [
        ("megatron", "dataset", "document_tokens", 2.5, "must be a whole number >= 1; got 2.5"),
        ("packed", "dataset", "context", 10.5, "must be a whole number; got 10.5"),
        ("padded", "dataset", "rows", 10.5, "must be a whole number; got 10.5"),
        ("table", "dataset", "width", 64.5, "must be a whole number; got 64.5"),
        ("parquet", "dataset", "group_rows", 2.5, "must be a whole number; got 2.5"),
        ("parquet", "reader", "window_rows", 2.5, "must be a whole number; got 2.5"),
        ("npz", "dataset", "files", 2.5, "must be a whole number; got 2.5"),
        ("npz", "dataset", "record_bytes_stdev", -1, "must be a whole number >= 0; got -1"),
        ("npz", "reader", "preprocess_time", float("inf"), "must be a finite number; got inf"),
        ("jpeg", "dataset", "image_hw", [8], "must be two whole numbers >= 1, e.g. image_hw = "
         "[640, 640]; got [8]"),
        ("jpeg", "dataset", "image_hw", [0, 8], "must be two whole numbers >= 1"),
        ("jpeg", "dataset", "image_hw", [8.5, 8], "must be two whole numbers >= 1"),
        ("jpeg", "dataset", "noise", -1, "must be a whole number >= 0; got -1"),
        ("jpeg", "dataset", "quality", 0, "must be in 1..100; got 0"),
        ("hub-images", "dataset", "noise", 2.5, "must be a whole number >= 0; got 2.5"),
        ("hub-images", "dataset", "image_hw", [16.5, 16], "must be two whole numbers"),
    ],
)  # fmt: skip
def test_the_other_kinds_refuse_fractions_and_values_they_cannot_use_naming_the_key(
    tmp_path: Path, name: str, section: str, key: str, value: Any, said: str
) -> None:
    # Until 2026-12-06 int() read each fraction as the whole number below it; image_hw =
    # [8] was an IndexError traceback, noise = -1 NumPy's "low >= high" from the generator,
    # a negative record_bytes_stdev ran, and preprocess_time = inf ran into time.sleep.
    wl = builtin_workloads()[name]
    for module, _ in kind_class(wl.kind).extras:
        pytest.importorskip(module)
    with pytest.raises(ConfigError) as got:
        make_kind(wl.replace(**{section: {key: value}}), str(tmp_path))
    assert f"{name}.toml [{section}]: {key} {said}" in str(got.value)


# -- digests under --sweep -----------------------------------------------------------


def _result(variant: str, digest: str) -> dict[str, Any]:
    return {"variant": variant, "digest": digest, "must_agree": True}


def test_variants_agree_within_each_swept_value_only() -> None:
    at_0 = [_result("naive?seed=0", "a"), _result("headrace-sync?seed=0", "a")]
    at_1 = [_result("naive?seed=1", "b"), _result("headrace-sync?seed=1", "b")]
    # Until 2026-12-06 the seeds were grouped together: "digests differ", exit 1.
    assert mismatches(at_0 + at_1, "seed") == []
    # One that differs at its own value is still a mismatch.
    bad = [at_1[0], _result("headrace-sync?seed=1", "c")]
    assert mismatches(at_0 + bad, "seed") == [["naive?seed=1"], ["headrace-sync?seed=1"]]
    assert mismatches(at_0 + at_1) == [
        ["naive?seed=0", "headrace-sync?seed=0"],
        [
            "naive?seed=1",
            "headrace-sync?seed=1",
        ],
    ]


def test_a_seed_sweep_of_agreeing_variants_exits_0_without_mismatches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r.json"
    argv = ["bench", "--root", str(tmp_path / "d"), *TINY, "--no-isolate", "--json", str(out)]
    rc = main([*argv, "--variants", "naive,headrace-sync", "--sweep", "seed=0,1"])
    assert "digests differ" not in capsys.readouterr().err
    assert rc == 0
    report = json.loads(out.read_text())
    assert report["workloads"][0]["mismatches"] == []
    digests = {r["variant"]: r["digest"] for r in report["results"]}
    assert digests["naive?seed=0"] == digests["headrace-sync?seed=0"]
    assert digests["naive?seed=1"] == digests["headrace-sync?seed=1"] != digests["naive?seed=0"]
