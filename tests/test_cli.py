"""The ``headrace`` command: user errors are messages with exit 2, never tracebacks."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from headrace.cli import main


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["emulate", "s3", "--endpoint", "http://127.0.0.1:1"],
            "headrace emulate: --endpoint only makes sense with --latency-ms, --mbps or "
            "--max-concurrent",
        ),
        (
            ["emulate", "s3", "--latency-ms", "-5"],
            "headrace emulate: --latency-ms must be a number >= 0 and --mbps one > 0 (got "
            "--latency-ms -5",
        ),
        (["emulate", "s3", "--mbps", "0"], "--mbps one > 0 (got --latency-ms 0, --mbps 0.0)"),
        # NaN passed "< 0" (and left the proxy out) until 2026-12-06, inf made every
        # request wait for ever.
        (["emulate", "s3", "--latency-ms", "nan"], "(got --latency-ms nan, --mbps None)"),
        (["emulate", "s3", "--latency-ms", "inf"], "(got --latency-ms inf, --mbps None)"),
        (["emulate", "s3", "--mbps", "nan"], "(got --latency-ms 0, --mbps nan)"),
        (["probe", ".", "--seed", "-1"], "--seed must be >= 0 (got --seed -1)"),
        (["emulate", "s3", "--max-concurrent", "0"], "--max-concurrent must be >= 1 (got 0)"),
        (["bench", "-w", "jpeg", "--max-concurrent", "0"], "--max-concurrent 0: expected a whole"),
        (
            ["bench", "-w", "jpeg", "--storage", "local", "--max-concurrent", "4"],
            "--latency-ms and --max-concurrent need --storage s3",
        ),
    ],
)
def test_subcommand_config_errors_are_messages(
    capsys: pytest.CaptureFixture[str], args: list[str], expected: str
) -> None:
    assert main(args) == 2
    err = capsys.readouterr().err
    assert expected in err and "Traceback" not in err


def test_unknown_command_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["frob"])
    assert exc.value.code == 2
    assert (
        "invalid choice: 'frob' (choose from 'bench', 'gen', 'probe', 'emulate', 'cache', 'check')"
        in (capsys.readouterr().err)
    )


@pytest.mark.parametrize("command", ["bench", "gen"])
def test_help_shows_the_real_default_root(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, command: str
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", "/somewhere/cache")
    with pytest.raises(SystemExit):
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "(default: /somewhere/cache/headrace/bench)" in out and "default: None" not in out


def test_a_closed_pipe_ends_the_output_quietly() -> None:
    # `headrace bench --list | head -1`: the reader is gone before the output is flushed
    # (closed here before the child has even imported headrace); no traceback.
    import subprocess
    import sys

    with subprocess.Popen(
        [sys.executable, "-m", "headrace.cli", "bench", "--list"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert proc.wait(timeout=60) == 141
    assert "Traceback" not in err and "BrokenPipe" not in err, err


@pytest.mark.parametrize(
    ("n", "text"),
    [
        (0, "0 B"),
        (516, "516 B"),
        (999, "999 B"),
        (1000, "1.0 kB"),
        (300_000, "300.0 kB"),
        (1_500_000, "1.5 MB"),
        (1_070_000_000, "1.07 GB"),
        (12_345e9, "12,345.00 GB"),
    ],
)
def test_sizes_are_shown_in_the_unit_that_reads(n: float, text: str) -> None:
    # One format for every size the CLI prints (bench demand, headrace cache).
    from headrace._messages import byte_size

    assert byte_size(n) == text


def test_version_says_which_headrace_and_python(capsys: pytest.CaptureFixture[str]) -> None:
    # There was none: `headrace --version` was "invalid choice: '--version'", exit 2.
    import platform

    import headrace

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out == f"headrace {headrace.__version__} (Python {platform.python_version()})\n"


@pytest.mark.parametrize(
    "args", [["emulate", "s3"], ["bench", "--storage", "s3", "--steps", "5", "--trials", "1"]]
)
def test_the_s3_emulator_without_moto_says_which_extra(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    args: list[str],
) -> None:
    # Fault injection: moto made unimportable, as without the emulate extra. The server's
    # child died with its own traceback, which the command printed whole (exit 2).
    monkeypatch.setitem(sys.modules, "moto", None)
    root = ["--root", str(tmp_path / "data"), "-q"] if args[0] == "bench" else []
    assert main([*args, *root]) == 2
    err = capsys.readouterr().err
    assert (
        "the local S3 emulator runs moto's server, and 'moto' is not installed: "
        "pip install 'headrace[emulate]'"
    ) in err
    assert "Traceback" not in err


def test_a_warning_a_command_prints_names_the_command(tmp_path: Path) -> None:
    # At the first frame outside headrace a command has only Python's own: `headrace bench`
    # printed "<frozen runpy>:88: RuntimeWarning: Loader.close(): gave up on ...". In a
    # process of its own: pytest records warnings instead of printing them.
    script = tmp_path / "warns.py"
    script.write_text(
        "import sys, warnings\n"
        "import headrace.bench._compare as c\n"
        "from headrace._warn import warn_user\n"
        "from headrace.cli import main\n"
        "def compare(*_):  # fault injection: a warning from inside the run\n"
        "    warn_user('Loader.close(): gave up on the read-ahead thread', RuntimeWarning)\n"
        "    return 0\n"
        "c.compare = compare\n"
        "before = warnings.formatwarning\n"
        "rc = main(['bench', 'compare', 'a.json', 'b.json'])\n"
        "assert warnings.formatwarning is before  # the command's alone\n"
        "sys.exit(rc)\n"
    )
    done = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == (
        "headrace bench: RuntimeWarning: Loader.close(): gave up on the read-ahead thread\n"
    )
