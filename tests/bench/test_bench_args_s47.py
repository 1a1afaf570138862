"""``headrace bench`` command lines (s47): flags ``--list`` without ``-w`` would drop, and
messages that name the flag the user typed, not the workload file's key it set."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

from headrace.bench._kind import make_kind
from headrace.bench._workload import load_workload
from headrace.cli import check, command_parser, main
from headrace.errors import ConfigError


def _refused(tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """``bench ARGV`` refused in one line (exit 2), nothing written under its root."""
    root = tmp_path / "root"
    assert main(["bench", "--root", str(root), "-q", *argv]) == 2
    err = capsys.readouterr().err
    # (--storage s3 notes what it changes for a token workload first, a line each)
    assert err.count("headrace bench:") == 1 and "Traceback" not in err, err
    assert err.endswith("\n") and err.splitlines()[-1].startswith("headrace bench:"), err
    assert not root.exists() or not any(root.iterdir())
    return err


@pytest.mark.parametrize(
    ("argv", "flags"),
    [
        (["--variants", "naive"], "--variants"),
        (["--variants", "nope"], "--variants"),
        (["--steps", "5", "--batch-size", "4"], "--steps and --batch-size"),
        (["--files", "8"], "--files"),
        (["--storage", "s3", "--sweep", "seed=0,1"], "--sweep and --storage"),
    ],
)
def test_list_without_a_workload_refuses_the_flags_that_change_workloads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], flags: str
) -> None:
    # `bench --list --variants nope` printed every built-in workload with its own
    # variants and exited 0: the flag (even a variant no workload has) was dropped.
    err = _refused(tmp_path, capsys, ["--list", *argv])
    assert f"--list without -w lists the built-in workloads as they ship; {flags}" in err
    assert "add -w NAME" in err
    # With -w they are applied, and listed.
    assert main(["bench", "--root", str(tmp_path / "r"), "--list", "-w", "tokens", "-q"]) == 0
    assert main(["bench", "--list", "-w", "tokens", "--variants", "naive"]) == 0
    assert "variants: naive\n" in capsys.readouterr().out


def test_list_without_a_workload_still_takes_the_listing_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --accelerators sets the demand listed, --root where datasets are looked for.
    argv = ["bench", "--list", "--root", str(tmp_path), "--accelerators", "4", "-q"]
    assert main(argv) == 0
    assert "tokens     [tokens]" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        # The kind's own check, of a value the flag gave: it named the file's workload.
        (["-w", "tokens", "--token-file-gib", "1e-9"], "--token-file-gib 1e-09: "),
        (["-w", "megatron", "--token-file-gib", "1e-9"], "--token-file-gib 1e-09: "),
        # Past 2**53: it said "jpeg.toml [dataset]: files = 1000...", a key never typed.
        (["-w", "jpeg", "--files", str(10**20)], f"--files {10**20}: expected a number, at most"),
        (
            ["-w", "tokens", "--token-file-gib", "1e30"],
            "--token-file-gib 1e+30: expected a number, at most",
        ),
        (
            ["-w", "tokens", "--storage", "s3", "--latency-ms", "1e300"],
            "--latency-ms 1e+300: expected a number",
        ),
        (
            ["-w", "jpeg", "--max-concurrent", str(10**20)],
            f"--max-concurrent {10**20}: expected a number",
        ),
    ],
)
def test_a_bad_flag_value_is_named_by_its_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    for listing in ([], ["--list"]):
        err = _refused(tmp_path, capsys, [*argv, *listing])
        line = err.splitlines()[-1]
        assert said in line and "--" not in line.split(said)[0], err  # (no other flag first)
        assert "token_file_gib" not in err and "[dataset]" not in err and "[reader]" not in err
    args = command_parser("bench").parse_args([*argv, "--root", str(tmp_path / "root")])
    with pytest.raises(ConfigError, match=said.replace("+", r"\+")):
        check("bench", args)


def test_a_bad_file_value_is_still_named_by_its_key(tmp_path: Path) -> None:
    text = (resources.files("headrace.bench") / "workloads" / "tokens.toml").read_text()
    path = tmp_path / "w.toml"
    path.write_text(text.replace("token_file_gib = 1.0", "token_file_gib = 1e30"))
    with pytest.raises(ConfigError, match=r"w\.toml \[dataset\]: token_file_gib = 1e\+30: "):
        make_kind(load_workload(str(path)), str(tmp_path))
    path.write_text(text.replace("token_file_gib = 1.0", "token_file_gib = 1e-9"))
    with pytest.raises(ConfigError, match="token file of 0 tokens is too small") as got:
        make_kind(load_workload(str(path)), str(tmp_path))
    assert "--token-file-gib" not in str(got.value)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--batch-size", str(10**20)], f"--batch-size {10**20}: "),
        (["--steps", str(10**23)], f"--steps {10**23}: "),
        (["--trials", str(10**18), "--steps", "100"], f"--steps 100 --trials {10**18}: "),
    ],
)
def test_a_run_past_int64_sample_numbers_is_refused_before_any_dataset(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    # --batch-size 1e20 was listed, and a run wrote the token file, printed its plan, then
    # stopped in the Loader ("steps [0, 7] with a global batch of ... are out of range"),
    # naming no flag; --steps 1e23 ran on (its end never planned) until it was killed.
    for listing in ([], ["--list"]):
        line = _refused(tmp_path, capsys, ["-w", "tokens", *argv, *listing]).splitlines()[-1]
        assert said in line and "past 2**63" in line, line


def test_a_workload_file_past_int64_sample_numbers_is_refused_naming_its_keys(
    tmp_path: Path,
) -> None:
    text = (resources.files("headrace.bench") / "workloads" / "tokens.toml").read_text()
    path = tmp_path / "w.toml"
    path.write_text(text.replace("batch_size = 32", f"batch_size = {2**62}"))
    with pytest.raises(ConfigError, match=r"w\.toml: train: batch_size x \(") as got:
        load_workload(str(path))
    assert "--batch-size" not in str(got.value)


@pytest.mark.parametrize("flag", ["--root", "--json", "--plot", "--dlio", "--sweep"])
def test_an_empty_value_is_refused_not_taken_for_no_flag(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    flag: str,
) -> None:
    # `--root "$DATA"` with DATA unset wrote the datasets into ~/.cache/headrace/bench,
    # `--json "$OUT"` ran and wrote no report (exit 0), `--dlio ""` ran the tokens
    # workload: an empty value read as the flag left out.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = [] if flag == "--root" else ["--root", str(tmp_path / "root")]
    for listing in ([], ["--list"]):
        argv = ["bench", *root, flag, "", "--token-file-gib", "0.001", "-q", *listing]
        assert main(argv) == 2
        line = capsys.readouterr().err.splitlines()[-1]
        assert f"headrace bench: {flag} '' is empty" in line, line
    assert not (tmp_path / "cache").exists() and not (tmp_path / "root").exists()
