"""How `headrace bench` runs its variants: a measurement process that dies, is killed or
prints more than its result; a variant whose stream ends before the steps it was opened
for. The failed variant is named with what it left on stderr, and the others are kept."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from headrace.bench import _runner
from headrace.bench._au import au_trial
from headrace.bench._kind import GenStream, Kind, Stream, make_kind
from headrace.bench._measure import CHILD
from headrace.bench._runner import RunOptions, run_workload
from headrace.bench._workload import load_workload
from headrace.errors import HeadraceError


@pytest.fixture(scope="module")
def tokens(tmp_path_factory: pytest.TempPathFactory) -> Kind:
    """A tiny token dataset, written once: naive and headrace-sync, 2 steps, 1 trial."""
    wl = load_workload("tokens").replace(
        dataset={"token_file_gib": 0.001},
        train={"steps": 2, "trials": 1, "warmup_steps": 1},
        variants=("naive", "headrace-sync"),
    )
    kind = make_kind(wl, str(tmp_path_factory.mktemp("tokens")))
    kind.write()
    return kind


def _child(victim: str) -> tuple[str, str]:
    """The measurement process's command line, ``victim`` run first in naive's (the fault
    injected: the request is read, and handed on to the real child)."""
    return (
        "-c",
        "import io, json, os, signal, sys\n"
        "_req = sys.stdin.read()\n"
        "sys.stdin = io.StringIO(_req)\n"
        "if json.loads(_req)['variant'] == 'naive':\n"
        f"    {victim}\n" + CHILD[1],
    )


@pytest.mark.parametrize(
    "junk",
    [
        # an exit handler that prints after the result: its last line was read as the JSON
        "import atexit; atexit.register(print, 'closing the tokens cache')",
        # a progress line without its newline: the result came on the same line
        "sys.stdout.write('reading 50%'); sys.stdout.flush()",
        # bytes that are no UTF-8 (a C library's): UnicodeDecodeError in subprocess.run
        "os.write(1, b'\\xff\\xfe junk\\n'); os.write(2, b'\\xe9t\\xe9\\n')",
    ],
)
def test_a_measurement_process_that_prints_more_than_its_result_is_measured(
    tokens: Kind, junk: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # JSONDecodeError from deep in the runner, the run lost with every variant's figures.
    monkeypatch.setattr(_runner, "CHILD", _child(junk))
    summary, results = run_workload(tokens)
    assert summary["failed"] == []
    assert [r["variant"] for r in results] == ["naive", "headrace-sync"]
    assert results[0]["digest"] == results[1]["digest"]


@pytest.mark.parametrize(
    ("victim", "said"),
    [
        # the OOM killer: exit -9, and an empty stderr read as nothing to say
        (
            "sys.stderr.write('allocating the window\\n'); sys.stderr.flush(); "
            "os.kill(os.getpid(), signal.SIGKILL)",
            "(exit -9): killed by SIGKILL (what the kernel's OOM killer sends when memory "
            "runs out: see dmesg); its stderr:\nallocating the window",
        ),
        ("os.kill(os.getpid(), signal.SIGKILL)", "killed by SIGKILL"),
        # exits the bench gives meaning to, without the line they promise: IndexError
        ("os._exit(3)", "(exit 3); it wrote nothing on stderr"),
        ("os._exit(4)", "(exit 4); it wrote nothing on stderr"),
        ("os._exit(0)", "(exit 0) without its result (a JSON line on stdout); it wrote nothing"),
        (
            "print('not a result'); sys.stdout.flush(); os._exit(0)",
            "without its result (a JSON line on stdout: it wrote 'not a result')",
        ),
    ],
)
def test_a_measurement_process_that_dies_is_named_and_the_others_are_kept(
    tokens: Kind, victim: str, said: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_runner, "CHILD", _child(victim))
    summary, results = run_workload(tokens)
    assert [r["variant"] for r in results] == ["headrace-sync"]
    (failed,) = summary["failed"]
    assert failed["variant"] == "naive"
    assert failed["error"].startswith(
        "variant 'naive' of workload 'tokens' failed in its measurement process (exit "
    ), failed["error"]
    assert said in failed["error"], failed["error"]


def test_a_stream_that_ends_before_its_steps_fails_that_variant_alone(
    tokens: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A variant that delivered fewer batches than it was opened for raised StopIteration
    # out of the timed trials: the run ended with a bare traceback, every figure lost.
    opened = tokens.open

    def short(spec: str, steps: int) -> Stream:  # fault injection: one batch too few
        stream = opened(spec, steps)
        if spec != "naive":
            return stream
        fewer = itertools.islice(iter(stream), steps - 1)
        return GenStream(fewer, stream.bytes_read, stream.close, stream.stats)

    monkeypatch.setattr(tokens, "open", short)
    summary, results = run_workload(tokens, options=RunOptions(isolate=False))
    assert [r["variant"] for r in results] == ["headrace-sync"]
    (failed,) = summary["failed"]
    assert failed["variant"] == "naive"
    assert failed["error"] == (
        "variant 'naive' of workload 'tokens': its stream ended in trial 1 of 1, short of the "
        "3 batches it was opened for (its measurement pass delivered 2 of 3): a variant must "
        "deliver every step it is asked for"
    )


def test_an_epoch_with_compute_whose_stream_ends_early_is_a_headrace_error() -> None:
    # StopIteration out of au_trial ended the run (trials with compute, or the search for
    # the most accelerators), every variant's figures lost.
    compute = np.zeros(3)
    with pytest.raises(HeadraceError, match=r"ended after 5 of the 6 batches of an epoch"):
        au_trial(iter(range(5)), 3, compute, 2)
    au, load = au_trial(iter(range(6)), 3, compute, 2)  # one that delivers them all
    assert 0.0 <= au and load is not None


def test_a_variants_error_is_named_though_an_exit_handler_warns_after_it(
    tokens: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An object-store error with requests still in flight: the exit handler's warning
    # ("headrace: exiting with N object-store request(s) still in flight") came after the
    # error on stderr, and the bench took its last line for the error: the error was lost.
    fail = (
        "from headrace.bench import _measure; from headrace.errors import StorageError; "
        "import atexit, logging; "
        "_measure.measure_pass = lambda *a: (_ for _ in ()).throw("
        "StorageError('s3://b/tokens.bin: GET failed: 503 SlowDown')); "
        "atexit.register(logging.getLogger('t').warning, "
        "'headrace: exiting with 2 object-store request(s) still in flight')"
    )
    monkeypatch.setattr(_runner, "CHILD", _child(fail))
    summary, results = run_workload(tokens)
    assert [r["variant"] for r in results] == ["headrace-sync"]
    (failed,) = summary["failed"]
    assert failed["error"] == (
        "variant 'naive' of workload 'tokens': StorageError: s3://b/tokens.bin: GET failed: "
        "503 SlowDown (before it: headrace: exiting with 2 object-store request(s) still "
        "in flight)"
    )


def test_an_error_with_an_http_bodys_line_breaks_is_named_whole(
    tokens: Kind, monkeypatch: pytest.MonkeyPatch
) -> None:
    # An object store's error quoting its HTTP response (CRLF line ends): the child joined
    # "\n" alone, the bench split its stderr at the "\r" too, and named the error's tail.
    fail = (
        "from headrace.bench import _measure; from headrace.errors import StorageError; "
        "_measure.measure_pass = lambda *a: (_ for _ in ()).throw(StorageError("
        "'s3://b/tokens.bin: GET failed: HTTP/1.1 503 Slow Down\\r\\nRetry-After: 1'))"
    )
    monkeypatch.setattr(_runner, "CHILD", _child(fail))
    summary, _ = run_workload(tokens)
    assert summary["failed"][0]["error"] == (
        "variant 'naive' of workload 'tokens': StorageError: s3://b/tokens.bin: GET failed: "
        "HTTP/1.1 503 Slow Down Retry-After: 1"
    )
