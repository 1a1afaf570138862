"""Ratios over a baseline or memcpy that measured no throughput."""

from __future__ import annotations

import jsonschema
from _bench_run import result_row, schema

from headrace.bench._ratios import ratios
from headrace.bench._report import format_table, table_figures


def test_a_baseline_of_no_throughput_gives_no_ratio_not_zero_division() -> None:
    # 0 batches/s in the baseline (or memcpy) ended the run in ZeroDivisionError after
    # every variant was measured; the ratio is not a figure there: null, "-" in the table.
    results = [
        result_row(variant="naive", batches_per_s=0.0),
        result_row(variant="memcpy", batches_per_s=0.0),
        result_row(variant="headrace"),
    ]
    ratios(results)
    assert [r["ratio_to_baseline"] for r in results] == [None, None, None]
    assert [r["ratio_to_memcpy"] for r in results] == [None, None, None]
    for r in results:
        r["table"] = table_figures(r)
    fields = schema()["properties"]["results"]["items"]["properties"]
    for key in ("ratio_to_baseline", "ratio_to_memcpy"):
        jsonschema.validate(None, fields[key])
    table = format_table({"results": results})
    assert "| headrace |" in table and "nan" not in table and "inf" not in table


def test_a_baseline_with_throughput_is_divided_by_as_before() -> None:
    results = [result_row(variant="naive", batches_per_s=20.0), result_row(variant="headrace")]
    ratios(results)
    assert [r["ratio_to_baseline"] for r in results] == [1.0, 2.5]
