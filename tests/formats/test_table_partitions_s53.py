"""A hive-partitioned Parquet dataset (``lang=en/part-0.parquet``, ``lang=de/...``, as
pyarrow's ``write_dataset`` and pandas' ``partition_cols`` write it) read through a
glob: what the messages of its source name."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from headrace.errors import ConfigError
from headrace.formats import TableSource


@pytest.fixture
def hive(tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    for i, lang in enumerate(["de", "en"]):
        (root / f"lang={lang}").mkdir(parents=True)
        ids = pa.array([[i, 1], [2]], pa.list_(pa.int32()))
        pq.write_table(pa.table({"tokens": ids}), root / f"lang={lang}" / "part-0.parquet")
    return root


@pytest.mark.parametrize("url", [False, True], ids=["local", "file-url"])
def test_a_source_of_several_partitions_is_named_by_its_root(hive: Path, url: bool) -> None:
    # Before: "<root>/lang=de: column 'tokens' holds variable-length lists ...": the
    # first file's folder, one partition of two, named as if it were the dataset.
    root = f"file://{hive}" if url else str(hive)
    with pytest.raises(ConfigError, match=rf"^{re.escape(root)}: column 'tokens' holds") as e:
        TableSource(f"{root}/**/*.parquet", columns=["tokens"])
    assert "lang=de" not in str(e.value)
    with pytest.raises(ConfigError, match=rf"^{re.escape(root)}: widths/pad_values name"):
        TableSource(f"{root}/**/*.parquet", columns=["tokens"], widths={"tokens": 4, "id": 2})


def test_a_source_of_one_partition_is_named_by_its_folder(hive: Path) -> None:
    # (Named so before too; the root above must not replace it.)
    pq.write_table(
        pq.read_table(hive / "lang=en" / "part-0.parquet"), hive / "lang=en" / "p1.parquet"
    )
    where = re.escape(str(hive / "lang=en"))
    with pytest.raises(ConfigError, match=rf"^{where}: column 'tokens' holds"):
        TableSource(f"{hive}/lang=en/*.parquet", columns=["tokens"])


def test_the_full_shuffle_warning_gives_a_small_row_group_its_size(tmp_path: Path) -> None:
    # Before: "a whole row group (about 0.0 MB here)" for row groups of a few kB.
    path = tmp_path / "t.parquet"
    rng = np.random.default_rng(0)
    ids = pa.array(list(rng.integers(0, 2**31, (600, 50), dtype=np.int32)), pa.list_(pa.int32()))
    pq.write_table(pa.table({"tokens": ids}), path, row_group_size=100, compression="none")
    size = path.stat().st_size / 6  # 20 kB of ids a row group, and a little more
    assert 20e3 < size < 30e3
    with pytest.warns(UserWarning, match=r"whole row group \(about 2\d\.\d kB here\)"):
        TableSource(f"file://{path}", width=64, shuffle="full").close()
