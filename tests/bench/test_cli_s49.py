"""``headrace bench`` command lines (s49): empty ``--variants`` entries and workload files'
``variants`` lists, ..."""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from headrace.bench._workload import load_workload
from headrace.cli import main
from headrace.errors import ConfigError


def _refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """``bench ARGV`` refused in one line (exit 2), nothing written under its root."""
    root = tmp_path / "root"
    assert main(["bench", "--root", str(root), "-q", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("headrace bench:") == 1 and "Traceback" not in err, err
    assert not root.exists() or not any(root.iterdir())
    return err


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("naive,,memcpy", "entry 2 of 3 ('') names no variant"),
        ("naive,memcpy,", "entry 3 of 3 ('') names no variant"),
        (",naive", "entry 1 of 2 ('') names no variant"),
        ("naive, ,memcpy", "entry 2 of 3 ('') names no variant"),
        ("naive,?prefetch=0", "entry 2 of 2 ('?prefetch=0') names no variant"),
    ],
)
def test_an_empty_variants_entry_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str, said: str
) -> None:
    # "naive,,memcpy" (a shell variable that expanded to nothing between the commas) ran
    # naive and memcpy, exit 0, the missing one never said; "naive,?prefetch=0" blamed
    # tokens.toml: "workload 'tokens': unknown variant ''".
    for listing in ([], ["--list"]):
        err = _refused(tmp_path, capsys, ["-w", "tokens", "--variants", given, *listing])
        assert f"--variants {given!r}: {said}" in err, err
        assert "tokens.toml" not in err


def test_a_variant_given_twice_names_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # It said "tokens.toml: variant 'naive' is listed more than once", of a file never opened.
    err = _refused(tmp_path, capsys, ["--list", "-w", "tokens", "--variants", "naive,naive"])
    assert "--variants 'naive,naive': variant 'naive' is listed more than once" in err
    assert "tokens.toml" not in err


@pytest.mark.parametrize(
    ("listed", "said"),
    [
        ('["naive", ""]', "variants entry 2 of 2 ('') names no variant"),
        ('["naive", "  "]', "variants entry 2 of 2 ('  ') names no variant"),
        ('["?prefetch=0"]', "variants entry 1 of 1 ('?prefetch=0') names no variant"),
    ],
)
def test_an_empty_entry_of_a_files_variants_is_refused(
    tmp_path: Path, listed: str, said: str
) -> None:
    # It was "unknown variant '' for kind 'tokens'", once the kind was built.
    text = (resources.files("headrace.bench") / "workloads" / "tokens.toml").read_text()
    lines = [ln for ln in text.splitlines() if not ln.startswith("variants")]
    path = tmp_path / "w.toml"
    path.write_text("\n".join([f"variants = {listed}", *lines]) + "\n")
    with pytest.raises(ConfigError, match="^" + re.escape(f"{path}: {said}")):
        load_workload(str(path))


def _yaml(tmp_path: Path, dataset: str) -> str:
    path = tmp_path / "w.yaml"
    path.write_text(f"dataset: {dataset}\n")
    return str(path)


@pytest.mark.parametrize(
    ("dataset", "said"),
    [
        # DLIO reads the type (np.dtype) with or without record_dims and stops on one it
        # does not know: beside record_length_bytes it was taken here without a word.
        (
            "{format: npy, record_length_bytes: 4096, record_element_type: float77}",
            "record_element_type 'float77' is not a NumPy type",
        ),
        # (NumPy knows bfloat16 once ml_dtypes is imported, as jax imports it: then a
        # type of no number, "is bfloat16 ('V'), not a number"; refused either way.)
        (
            "{format: npz, record_length: 4096, record_element_type: bfloat16}",
            "record_element_type 'bfloat16' is ",
        ),
        # NumPy parses "(2," as a tuple: a SyntaxError traceback
        (
            "{format: npy, record_dims: [4], record_element_type: '(2,'}",
            "record_element_type '(2,' is not a NumPy type",
        ),
        # Types that hold no number (or several) sized the records without a word.
        (
            "{format: npy, record_dims: [4], record_element_type: O}",
            "record_element_type 'O' is object ('O'), not",
        ),
        (
            "{format: hdf5, record_dims: [4], record_element_type: M8}",
            "record_element_type 'M8' is datetime64",
        ),
        (
            "{format: npz, record_dims: [4], record_element_type: S5}",
            "record_element_type 'S5' is |S5 ('S'), not",
        ),
        (
            "{format: npy, record_dims: [4], record_element_type: 'i4,i4'}",
            "record_element_type 'i4,i4' is [",
        ),
        (
            "{format: npy, record_dims: [4], record_element_type: '(2,3)f4'}",
            "record_element_type '(2,3)f4' is (",
        ),
    ],
)
def test_a_record_element_type_dlio_cannot_use_is_refused(
    tmp_path: Path, dataset: str, said: str
) -> None:
    from headrace.bench._dlio import dlio_workload

    path = _yaml(tmp_path, dataset)
    with pytest.raises(ConfigError) as info:
        dlio_workload(path)
    assert str(info.value).startswith(f"{path}: dataset.{said}"), info.value


@pytest.mark.parametrize(
    ("dataset", "record"),
    [
        # record_length without record_dims: bytes, whatever numeric type is named
        ("{format: npy, record_length: 4096, record_element_type: float32}", 4096),
        ("{format: npz, record_length_bytes: 1000, record_element_type: float16}", 1000),
        # record_dims x the type's size
        ("{format: hdf5, record_dims: [4, 4], record_element_type: float64}", 128),
        ("{format: npy, record_dims: [3, 5], record_element_type: bool}", 15),
        ("{format: tfrecord, record_dims: [64], record_element_type: complex64}", 512),
        ("{format: npy, record_dims: [8], record_element_type: '<f2'}", 16),
    ],
)
def test_record_sizes_dlio_takes_are_read(tmp_path: Path, dataset: str, record: int) -> None:
    from headrace.bench._dlio import dlio_workload

    assert dlio_workload(_yaml(tmp_path, dataset)).dataset["record_bytes"] == record


def test_an_image_takes_any_record_element_type_as_uint8(tmp_path: Path) -> None:
    # DLIO resets an image's element type to uint8 before it reads it, whatever it names.
    from headrace.bench._dlio import dlio_workload

    path = _yaml(tmp_path, "{format: png, record_dims: [8, 8], record_element_type: float77}")
    wl = dlio_workload(path)
    assert "record_element_type float77 read as uint8" in wl.description


def _run(tmp_path: Path, name: str, variants: str) -> str:
    out = tmp_path / f"{name}.json"
    argv = ["bench", "--root", str(tmp_path / "d"), "-q", "--no-isolate"]
    argv += ["--token-file-gib", "0.004", "--steps", "5", "--trials", "1", "--warmup", "1"]
    assert main([*argv, "--variants", variants, "--json", str(out)]) == 0
    return str(out)


def test_compare_of_reports_with_no_variant_in_common_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # naive against memcpy: two "only in" rows and exit 0, so a script that checks each
    # run against a baseline passed where nothing was compared.
    a, b = _run(tmp_path, "a", "naive"), _run(tmp_path, "b", "memcpy")
    capsys.readouterr()
    assert main(["bench", "compare", a, b]) == 1
    out, err = capsys.readouterr()
    assert "only in A" in out and "only in B" in out
    assert (
        "no variant of a workload is in both reports (A: tokens/naive; B: tokens/memcpy): "
        "nothing compared" in err
    )
    # One variant in common is a comparison (the others: only in one, as before).
    both = _run(tmp_path, "c", "naive,memcpy")
    assert main(["bench", "compare", a, both]) == 0
    assert "nothing compared" not in capsys.readouterr().err


def test_a_workload_that_could_not_be_measured_is_named_in_the_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # -w tokens -w t2, t2's dataset not written (a full disk: fault injection): the run
    # exited 2 and its JSON held tokens alone, without a word of t2.
    import errno
    import json

    from headrace.bench import _cli

    text = (resources.files("headrace.bench") / "workloads" / "tokens.toml").read_text()
    t2 = tmp_path / "t2.toml"
    t2.write_text(text.replace('name = "tokens"', 'name = "t2"'))
    real = _cli._generate

    def generate(kind: object, *args: object) -> None:
        if kind.workload.name == "t2":  # type: ignore[attr-defined]
            raise OSError(errno.ENOSPC, "No space left on device")
        real(kind, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(_cli, "_generate", generate)
    out = tmp_path / "r.json"
    argv = ["bench", "--root", str(tmp_path / "d"), "-q", "--no-isolate", "-w", "tokens"]
    argv += ["-w", str(t2), "--token-file-gib", "0.004", "--steps", "5", "--trials", "1"]
    assert main([*argv, "--warmup", "1", "--variants", "naive", "--json", str(out)]) == 2
    report = json.loads(out.read_text())
    assert [r["workload"] for r in report["results"]] == ["tokens"]
    assert "t2: not measured: t2: [Errno 28] No space left on device" in report["notes"]
    assert "headrace bench: t2: [Errno 28] No space left on device" in capsys.readouterr().err


def test_a_run_that_measured_nothing_says_no_report_was_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Its one workload's dataset not written (a full disk: fault injection): exit 2 with
    # the error alone, and r.json, last run's, was there for a script to read as this one's.
    import errno

    from headrace.bench import _cli

    def generate(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(_cli, "_generate", generate)
    out = tmp_path / "r.json"
    out.write_text('{"results": []}')
    argv = ["bench", "--root", str(tmp_path / "d"), "-q", "--no-isolate", "--variants", "naive"]
    assert main([*argv, "--token-file-gib", "0.004", "--json", str(out)]) == 2
    err = capsys.readouterr().err
    assert "headrace bench: tokens: [Errno 28] No space left on device" in err
    assert err.endswith(f"headrace bench: nothing measured; no report written to {out}\n")


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("naive,nope", "--variants 'naive,nope': workload 'tokens': unknown variant 'nope'"),
        ("naive?x", "--variants 'naive?x': variant 'naive?x': option 'x' is not key=value"),
        (
            "headrace-async?prefetch=0&prefetch=1",
            "--variants 'headrace-async?prefetch=0&prefetch=1': variant "
            "'headrace-async?prefetch=0&prefetch=1': option 'prefetch' is given twice",
        ),
        ("naive?colour=red", "--variants 'naive?colour=red': variant 'naive?colour=red': "),
    ],
)
def test_a_bad_variant_of_the_flag_is_named_by_the_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], given: str, said: str
) -> None:
    # They said "tokens.toml: ...", of a file the command line never named (-w tokens).
    for listing in ([], ["--list"]):
        err = _refused(tmp_path, capsys, ["-w", "tokens", "--variants", given, *listing])
        assert said in err and "tokens.toml" not in err, err
    # A workload file's own variants are still named by the file.
    text = (resources.files("headrace.bench") / "workloads" / "tokens.toml").read_text()
    path = tmp_path / "w.toml"
    path.write_text(text.replace('"naive", ', '"nope", ', 1))
    err = _refused(tmp_path, capsys, ["-w", str(path), "--list"])
    assert f"{path}: workload 'tokens': unknown variant 'nope'" in err


@pytest.mark.parametrize(
    ("dataset", "said"),
    [
        # It blamed a flag never typed: "--record-scale 1 makes the dataset's 0 B records
        # 0.4 B, less than a byte"
        ("{format: npy, record_length_bytes: 0.4}", "record_length_bytes must be at least 1"),
        # It named record_length_bytes, a key the YAML does not have
        ("{format: npz, record_length: 0}", "record_length must be at least 1 (a byte; got 0)"),
    ],
)
def test_a_record_of_less_than_a_byte_is_refused_naming_its_key(
    tmp_path: Path, dataset: str, said: str
) -> None:
    from headrace.bench._dlio import dlio_workload

    path = _yaml(tmp_path, dataset)
    with pytest.raises(ConfigError) as info:
        dlio_workload(path)
    assert str(info.value).startswith(f"{path}: dataset.{said}"), info.value
    assert "--record-scale" not in str(info.value)
