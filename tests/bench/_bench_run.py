"""What the bench tests share: the report's JSON schema, and a run of a workload file."""

from __future__ import annotations

import json
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from headrace.cli import main


def schema() -> dict[str, Any]:
    """``headrace.bench``'s report schema (``report.schema.json``)."""
    text = (resources.files("headrace.bench") / "report.schema.json").read_text()
    return json.loads(text)  # type: ignore[no-any-return]


def bench_file(tmp_path: Path, text: str, *extra: str, stem: str = "w") -> dict[str, Any]:
    """The JSON report of ``headrace bench`` (in this process, quiet, data under
    ``tmp_path/d``) of the workload file ``text``, written to ``tmp_path/<stem>.toml``;
    ``extra``: more of the command line. The run must exit 0."""
    path = tmp_path / f"{stem}.toml"
    path.write_text(text)
    out = tmp_path / "r.json"
    args = ["bench", "-w", str(path), "--root", str(tmp_path / "d"), "-q", "--no-isolate"]
    assert main([*args, *extra, "--json", str(out)]) == 0
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def result_row(workload: str = "u", steps: int = 1000, **more: Any) -> dict[str, Any]:
    """A report's result row of one variant, as the table, compare and the plot read it
    (``more``: the keys a test sets, ``au=0.9``)."""
    return {
        "workload": workload,
        "variant": "headrace",
        "batches_per_s": 50.0,
        "batches_per_s_spread": {"min": 40.0, "max": 60.0, "median": 50.0},
        "gb_per_s": 0.5,
        "ratio_to_baseline": 1.0,
        "ratio_to_memcpy": None,
        "au": 0.95,
        "au_pass": True,
        "bytes_before_first_batch": 0,
        "peak_rss_bytes": None,
        "amplification": 1.0,
        "digest": "ab" * 32,
        "steps": steps,
        "steps_per_trial": steps,
        **more,
    }


class Wrapped:
    """A variant's trial stream wrapped by a test: each batch passes :meth:`taking` (fault
    injection) and is counted in ``taken``; the rest is the real stream's."""

    def __init__(self, stream: Any) -> None:
        self.stream, self.taken = stream, 0

    def taking(self) -> None:
        """Called as each batch is taken, ``taken`` counting those before it."""

    def __iter__(self) -> Iterator[Any]:
        for batch in self.stream:
            self.taking()
            self.taken += 1
            yield batch

    def bytes_read(self) -> int:
        return int(self.stream.bytes_read())

    def stats(self) -> dict[str, Any]:
        return dict(self.stream.stats())

    def close(self) -> None:
        self.stream.close()
