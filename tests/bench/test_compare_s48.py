"""``headrace bench compare``: long names, and reports of other versions (keys missing)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from headrace.cli import main


def _write(path: Path, *rows: dict[str, Any]) -> str:
    path.write_text(json.dumps({"schema": "headrace.bench/1", "results": list(rows)}))
    return str(path)


def _row(**more: Any) -> dict[str, Any]:
    return {"workload": "npz", "variant": "headrace", "batches_per_s": 10.0, "steps": 4, **more}


def test_compare_keeps_its_columns_under_long_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A swept variant (36 characters) and a workload of 23 pushed its row's figures right
    # of the header's columns: "B/A" stood over a batches/s.
    long = _row(workload="very-long-workload-name", variant="headrace?prefetch=0&block_mib=1")
    a = _write(tmp_path / "a.json", _row(digest="d"), {**long, "digest": "d"})
    b = _write(tmp_path / "b.json", _row(digest="d", batches_per_s=20.0), {**long, "digest": "d"})
    assert main(["bench", "compare", a, b]) == 0
    head, *rows = capsys.readouterr().out.splitlines()
    assert len(rows) == 2
    for name in ("batches/s A", "B/A"):
        end = head.index(name) + len(name)
        for row in rows:
            # each row's cell under the header's: right-aligned figures end where it ends
            assert row[end - 1] != " " and row[end] == " ", (name, head, row)
    end = head.index("B/A") + len("B/A")
    assert [row[:end].split()[-1] for row in rows] == ["2.00x", "1.00x"]
    assert rows[1][head.index("digest") :].strip() == "same"


@pytest.mark.parametrize(
    ("a_canonical", "b_canonical"),
    [(None, None), ("c1", None), (None, "c1")],
)
def test_compare_does_not_judge_canonical_digests_a_report_lacks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], a_canonical: str, b_canonical: str
) -> None:
    # A report without canonical digests (written before them, or by hand) was said
    # "same (canonical)" beside another without (None == None), and "DIFFERS
    # (canonical)", exit 1, beside one with: a digest that was never taken was compared.
    def row(canonical: str | None, digest: str) -> dict[str, Any]:
        extra = {} if canonical is None else {"canonical_digest": canonical}
        return _row(variant="iterable", digest=digest, digest_compared="canonical", **extra)

    a = _write(tmp_path / "a.json", row(a_canonical, "d1"))
    b = _write(tmp_path / "b.json", row(b_canonical, "d2"))
    assert main(["bench", "compare", a, b]) == 0
    out = capsys.readouterr().out.splitlines()[1]
    assert "same" not in out and "DIFFERS" not in out
    lacking = " and ".join(s for s, c in (("A", a_canonical), ("B", b_canonical)) if c is None)
    assert out.endswith(f"not compared (no canonical digest in {lacking})"), out


def test_compare_of_an_order_free_run_beside_an_ordered_one_is_not_a_difference(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # B's variant reads in another order by design (digest_compared null: its digest is
    # not compared), A's was compared in order: compare took B's digest as the order's
    # and said DIFFERS, exit 1; only A's being null was looked at.
    a = _write(tmp_path / "a.json", _row(digest="d1", digest_compared="ordered"))
    b = _write(tmp_path / "b.json", _row(digest="d2", digest_compared=None))
    for first, second in ((a, b), (b, a)):
        assert main(["bench", "compare", first, second]) == 0
        line = capsys.readouterr().out.splitlines()[1]
        assert line.endswith("not compared (another order by design)"), line


def _with(path: Path, rows: list[dict[str, Any]], **report: Any) -> str:
    path.write_text(json.dumps({"schema": "headrace.bench/1", "results": rows, **report}))
    return str(path)


def test_compare_says_a_variant_failed_in_b_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # A variant that failed in B (its reads refused, its bytes wrong) was "only in A",
    # exit 0: a script comparing each run with a baseline passed the run that broke it.
    rows = [_row(variant="naive", digest="d"), _row(digest="d")]
    a = _with(tmp_path / "a.json", rows)
    failed = [{"variant": "headrace", "error": "variant 'headrace' of workload 'npz': boom"}]
    workloads = [{"name": "npz", "failed": failed}]
    b = _with(tmp_path / "b.json", rows[:1], workloads=workloads)
    assert main(["bench", "compare", a, b]) == 1
    out, err = capsys.readouterr()
    line = next(x for x in out.splitlines() if " headrace " in x)
    assert line.endswith("only in A; FAILED in B (see its notes)"), line
    assert "1 variant(s) failed in B" in err
    # Failed in A and measured in B: a fix, said, not a failure of B.
    assert main(["bench", "compare", b, a]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if " headrace " in x)
    assert line.endswith("only in B; failed in A (see its notes)"), line


def test_compare_says_which_report_was_interrupted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An interrupted run reports the trials it finished (and leaves variants out): compare
    # set its figures beside a whole run's without a word.
    a = _with(tmp_path / "a.json", [_row(digest="d")])
    b = _with(tmp_path / "b.json", [_row(digest="d", trials=1)], interrupted=True)
    assert main(["bench", "compare", a, b]) == 0
    out = capsys.readouterr().out
    assert out.startswith("note: B was interrupted (Ctrl-C or SIGTERM)"), out


def test_compare_keeps_its_au_columns_under_an_au_of_many_decimals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An AU printed to as many decimals as its verdict needs ("0.899999* FAIL" beside a
    # threshold of 0.90) is wider than the column's 12: the B column and digest moved.
    workloads = [{"name": "npz", "au_threshold": 0.9}]
    row = _row(digest="d", au=0.899999, au_pass=False, steps_per_trial=4)
    a = _with(tmp_path / "a.json", [row], workloads=workloads)
    b = _with(tmp_path / "b.json", [{**row, "au": 0.95, "au_pass": True}], workloads=workloads)
    assert main(["bench", "compare", a, b]) == 0
    head, line = capsys.readouterr().out.splitlines()[:2]
    assert "0.899999* FAIL" in line
    for name in ("AU A", "digest"):
        at = head.index(name)
        assert line[at - 1] == " ", (name, head, line)
    end = head.index("AU A") + len("AU A")
    assert line[:end].endswith("0.899999* FAIL"), (head, line)
