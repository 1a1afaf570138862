"""Parquet tables on a real S3 endpoint (moto on 127.0.0.1), directly and through the fault proxy.

The dataset is written as local Parquet files and uploaded; the S3 copy must
give the local files' batches, bit for bit, on any number of hosts, after a
resume and in a pickled (worker) copy.
"""

from __future__ import annotations

import pickle
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from s3util import BUCKET, STALL_RETRY, STALL_S, S3Fixture, loaders_closing_between
from s3util import store_options as options

from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import (
    ConfigError,
    FormatError,
    ObjectNotFoundError,
    PermissionDeniedError,
    StorageError,
)
from headrace.formats import Table, TableSource
from headrace.formats._object_files import ObjectFiles
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

pytestmark = pytest.mark.integration

URL = f"s3://{BUCKET}/tables"
FILES = [f"train-{i}.parquet" for i in range(3)]
GROUP_ROWS = 500
KW: dict[str, Any] = {"columns": ["input_ids", "label"], "width": 96, "window_rows": 1500}


def _table(i: int, rows: int = 2000) -> pa.Table:
    rng = np.random.default_rng(i)
    lengths = rng.integers(1, 96, rows)
    ids = [rng.integers(0, 50_000, n).astype(np.int32) for n in lengths]
    return pa.table(
        {
            "input_ids": pa.array(ids, pa.list_(pa.int32())),
            "label": np.arange(rows, dtype=np.int64) + i * rows,
            "text": [f"row {i}-{r}" for r in range(rows)],
        }
    )


def _put(s3: S3Fixture, key: str, body: bytes) -> None:
    s3.server.info.boto3_client().put_object(Bucket=BUCKET, Key=f"tables/{key}", Body=body)


@pytest.fixture(scope="module")
def root(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three Parquet files of 4 row groups under ``root``, and as objects under ``tables/``."""
    root = tmp_path_factory.mktemp("tables")
    for i, name in enumerate(FILES):
        pq.write_table(_table(i), root / name, row_group_size=GROUP_ROWS)
        _put(s3, name, (root / name).read_bytes())
    return root


def s3_source(s3: S3Fixture, url: str = URL, endpoint: str | None = None, **kw: Any) -> TableSource:
    return TableSource(url, store_options=options(s3, endpoint), **{**KW, **kw})


def digest(make: Any, steps: int = 60, batch: int = 32, world: int = 1) -> list[str]:
    return [
        batch_digest(
            Loader(make(), batch_size=batch, seed=5, steps=steps, rank=r, world_size=world)
        )
        for r in range(world)
    ]


@pytest.mark.filterwarnings("ignore:.*a full shuffle of a table on object storage")
@pytest.mark.parametrize("shuffle", ["window", "full"])
def test_s3_gives_the_local_batches_on_1_and_2_hosts(
    s3: S3Fixture, root: Path, shuffle: str
) -> None:
    steps = 6000 * 5 // 4 // 32  # 1.25 epochs: every window, some twice
    for world in (1, 2):
        want = digest(lambda: TableSource(root, shuffle=shuffle, **KW), steps, world=world)
        got = digest(lambda: s3_source(s3, shuffle=shuffle), steps, world=world)
        assert got == want, world
    local, remote = TableSource(root, **KW), s3_source(s3)
    assert remote.table.remote and not local.table.remote
    assert remote.fingerprint() == local.fingerprint()  # a local state resumes on S3
    assert [size for _, size in remote.table.files] == [size for _, size in local.table.files]
    assert remote.table.files[0][0] == f"{URL}/{FILES[0]}"
    remote.close()


def test_one_object_a_glob_and_a_list_of_urls(s3: S3Fixture, root: Path) -> None:
    _put(s3, "sub/deeper.parquet", (root / FILES[0]).read_bytes())  # another split, say
    prefix = Table.open(f"{URL}/", store_options=options(s3))
    assert [u for u, _ in prefix.files] == [f"{URL}/{f}" for f in FILES]  # not sub/
    prefix.close()
    one = Table.open(f"{URL}/{FILES[1]}", store_options=options(s3))
    assert len(one) == 2000 and one.group_rows.tolist() == [GROUP_ROWS] * 4
    assert one.read_rows([3, 1999], ["label"])["label"].tolist() == [2003, 3999]
    one.close()
    with Table.open(f"{URL}/*.parquet", store_options=options(s3)) as every:
        assert len(every.files) == 3
    glob = Table.open(f"{URL}/train-[02].parquet", store_options=options(s3))
    assert [u for u, _ in glob.files] == [f"{URL}/{FILES[0]}", f"{URL}/{FILES[2]}"]
    listed = Table.open([f"{URL}/{FILES[2]}", f"{URL}/{FILES[0]}"], store_options=options(s3))
    assert listed.read_rows([0, 2000], ["label"])["label"].tolist() == [4000, 0]  # list order
    for t in (glob, listed):
        t.close()
    with pytest.raises(ConfigError, match=r"train-2\.parquet: listed twice .* its rows twice"):
        Table.open([f"{URL}/{FILES[2]}", f"{URL}/{FILES[2]}"], store_options=options(s3))


def test_a_list_of_urls_is_stat_with_its_heads_in_flight_together(
    s3: S3Fixture, root: Path
) -> None:
    # One HEAD per listed URL, all on the request queue at once: with 100 ms per
    # request, one after another would never have two in flight.
    urls = [f"{URL}/{f}" for f in FILES] * 2
    with LatencyProxy(s3.server.endpoint, latency_ms=100) as slow:
        stores = ObjectFiles(options(s3, slow.endpoint), in_flight=4)
        try:
            infos = stores.infos(urls)
            assert [i.size for i in infos] == [(root / f).stat().st_size for f in FILES] * 2
            assert slow.stats.requests == len(urls)
            # Together (one after another: 1), bounded by in_flight; not "== 4": a loaded
            # machine may start the fourth after the first's 100 ms are over.
            assert 2 <= slow.stats.max_in_flight <= 4
            slow.reset_stats()
            with pytest.raises(ObjectNotFoundError, match=rf"{URL}/nope\.parquet"):
                stores.infos([*urls[:3], f"{URL}/nope.parquet"])
            assert slow.stats.requests == 4  # every HEAD finished before the error
        finally:
            stores.close()
    with Table.open(urls[:3], store_options=options(s3)) as listed:
        assert len(listed) == 3 * 2000


def test_resume_mid_run_on_s3(s3: S3Fixture, root: Path) -> None:
    assert_resume_exact(
        lambda: Loader(s3_source(s3), batch_size=32, seed=4, steps=80, chunk_steps=4),
        steps=80,
        resume_at=[1, 40, 70],
    )


def test_a_pickled_copy_reopens_without_listing_and_reads_the_same(
    s3: S3Fixture, root: Path, proxy: LatencyProxy
) -> None:
    src = s3_source(s3, endpoint=proxy.endpoint)
    proxy.reset_stats()
    copy = pickle.loads(pickle.dumps(src))
    assert proxy.stats.requests == len(FILES)  # one footer GET per file: no LIST, no HEAD
    assert copy.fingerprint() == src.fingerprint()
    rows = np.arange(0, 6000, 7)
    a, b = src.read(3, rows), copy.read(3, rows)
    assert all(np.array_equal(a[k], b[k]) for k in a)
    src.close()
    copy.close()


def test_read_ahead_fetches_each_row_group_once_many_in_flight(s3: S3Fixture, root: Path) -> None:
    src = s3_source(s3, in_flight=8)
    base = src.object_stats
    assert base is not None and base.requests == 1 + len(FILES)  # the LIST, the footers
    with Loader(src, batch_size=32, seed=2, steps=6000 // 32) as loader:  # one epoch
        for _ in loader:
            pass
    stats = src.object_stats
    assert stats is not None
    # Every row group fetched once (one GET: its chunks are adjacent) and decoded once.
    assert src.table.decoded == 12
    assert stats.requests - base.requests == 12
    assert src.table.misses == 0
    assert 1 < stats.max_in_flight_observed <= 8
    src.close()


# -- faults and bad objects ----------------------------------------------------------------


def test_5xx_is_retried_and_the_digest_holds(
    s3: S3Fixture, root: Path, proxy: LatencyProxy
) -> None:
    want = digest(lambda: TableSource(root, **KW))
    proxy.set_faults(
        [FaultRule(kind="status", status=503, match="GET /headrace-test/tables/", every=3, limit=6)]
    )
    src = s3_source(s3, endpoint=proxy.endpoint)
    assert digest(lambda: src) == want
    assert proxy.stats.faults >= 3
    assert src.object_stats is not None and src.object_stats.retries >= 3


def test_permanent_errors_name_the_object(s3: S3Fixture, root: Path, proxy: LatencyProxy) -> None:
    src = s3_source(s3, endpoint=proxy.endpoint)  # footers read
    proxy.set_faults([FaultRule(kind="status", status=403, match="GET /headrace-test/tables/")])
    with pytest.raises(PermissionDeniedError, match=rf"{URL}/train-\d\.parquet, bytes \["):
        src.read(0, np.arange(32))
    proxy.set_faults([])
    src.close()
    with pytest.raises(ObjectNotFoundError, match=rf"{URL}/nope\.parquet"):
        s3_source(s3, f"{URL}/nope.parquet")


def test_an_object_replaced_while_open_is_refused(
    s3: S3Fixture, root: Path, tmp_path: Path
) -> None:
    body = (root / FILES[0]).read_bytes()
    _put(s3, "swap/a.parquet", body)
    src = s3_source(s3, f"{URL}/swap/", shuffle=False)
    src.read(0, np.arange(4))  # row group 0
    pq.write_table(_table(9), tmp_path / "other.parquet", row_group_size=GROUP_ROWS)
    _put(s3, "swap/a.parquet", (tmp_path / "other.parquet").read_bytes())
    with pytest.raises(
        StorageError, match=r"swap/a\.parquet, bytes \[\d+, \d+\): the object changed"
    ):
        src.read(0, np.arange(1000, 1032))  # a row group not read before
    src.close()


def test_bad_objects_get_clear_errors(s3: S3Fixture, root: Path) -> None:
    body = (root / FILES[0]).read_bytes()
    _put(s3, "bad/truncated.parquet", body[: len(body) // 2])
    with pytest.raises(FormatError, match=r"bad/truncated\.parquet: not a Parquet file"):
        s3_source(s3, f"{URL}/bad/truncated.parquet")
    _put(s3, "bad/tiny.parquet", b"PAR1")
    with pytest.raises(FormatError, match=r"bad/tiny\.parquet: 4 bytes is too small"):
        s3_source(s3, f"{URL}/bad/tiny.parquet")
    footer_len = int.from_bytes(body[-8:-4], "little")
    huge = body[:-8] + (len(body) * 2).to_bytes(4, "little") + b"PAR1"
    _put(s3, "bad/footer.parquet", huge)
    with pytest.raises(FormatError, match=r"bad/footer\.parquet: corrupt Parquet footer"):
        s3_source(s3, f"{URL}/bad/footer.parquet")
    scrambled = bytearray(body)
    scrambled[-8 - footer_len : -8 - footer_len + 40] = bytes(40)
    _put(s3, "bad/meta.parquet", bytes(scrambled))
    with pytest.raises(FormatError, match=r"bad/meta\.parquet: truncated or corrupt Parquet"):
        s3_source(s3, f"{URL}/bad/meta.parquet")
    # Data pages overwritten: the footer is fine, the row group is not.
    pf = pq.ParquetFile(root / FILES[0])
    col = pf.metadata.row_group(1).column(0)
    start = col.dictionary_page_offset or col.data_page_offset
    garbled = bytearray(body)
    garbled[start : start + 64] = b"\xff" * 64
    _put(s3, "bad/pages.parquet", bytes(garbled))
    src = s3_source(s3, f"{URL}/bad/pages.parquet", shuffle=False)
    src.read(0, np.arange(32))  # row group 0 is intact
    with pytest.raises(FormatError, match=r"bad/pages\.parquet: row group 1: truncated or corrupt"):
        src.read(0, np.arange(GROUP_ROWS, GROUP_ROWS + 32))
    src.close()


def test_what_cannot_be_opened_on_object_storage(s3: S3Fixture, root: Path) -> None:
    _put(s3, "arrow/data-00000-of-00001.arrow", b"ARROW1")
    with pytest.raises(FormatError, match=r"00001\.arrow: 6 bytes is too small for an Arrow"):
        s3_source(s3, f"{URL}/arrow")
    # Nothing under a prefix said "empty dataset: no .arrow or .parquet files, no
    # state.json"; it says so, with the prefix beside it that a misspelt one meant.
    with pytest.raises(FormatError) as info:
        s3_source(s3, f"{URL}/nothing")
    assert str(info.value) == f"{URL}/nothing: nothing is stored under it"
    with pytest.raises(FormatError) as info:
        s3_source(s3, f"{URL}/arow")
    meant = f"{URL}/arrow"
    assert str(info.value) == f"{URL}/arow: nothing is stored under it; did you mean {meant!r}?"
    # An object whose name has no table suffix: "did you mean" named the URL given.
    _put(s3, "bare/part", (root / FILES[0]).read_bytes())
    with pytest.raises(FormatError) as info:
        s3_source(s3, f"{URL}/bare/part")
    assert str(info.value) == (
        f"{URL}/bare/part: an object, not a prefix, and a table object's name ends in "
        ".parquet or .arrow, .feather, .ipc, .arrows: copy it to a name with its format's suffix"
    )
    with pytest.raises(FormatError, match=r"no objects match"):
        s3_source(s3, f"{URL}/zzz-*.parquet")
    with pytest.raises(ConfigError, match=r"table.s files are all local paths or all object"):
        Table.open([f"{URL}/{FILES[0]}", str(root / FILES[0])], store_options=options(s3))
    # A prefix of the Hub's layout holds every split: read as one, the test split would
    # be trained on. Refused, with a glob of one split, which opens.
    for split in ("train", "test"):
        _put(s3, f"splits/{split}-00000-of-00001.parquet", (root / FILES[0]).read_bytes())
    with pytest.raises(
        ConfigError, match=r"splits holds Parquet files of several splits \['test', 'train'\]"
    ):
        s3_source(s3, f"{URL}/splits")
    assert len(s3_source(s3, f"{URL}/splits/test-*.parquet")) == 2000
    # push_to_hub's layout: the shards under data/, beside the README. The prefix itself
    # holds no table: the message names the folder that does, and one split's glob.
    _put(s3, "repo/README.md", b"---\nconfigs: []\n---\n")
    for split in ("train", "test"):
        _put(s3, f"repo/data/{split}-00000-of-00001.parquet", (root / FILES[0]).read_bytes())
    with pytest.raises(
        ConfigError,
        match=r"tables/repo has no table files right under it, but its subfolder data does: "
        r".*repo/data holds Parquet files of several splits \['test', 'train'\].*"
        r"repo/data/test-\*\.parquet",
    ):
        s3_source(s3, f"{URL}/repo")
    _put(s3, "repo1/data/train-00000-of-00001.parquet", (root / FILES[0]).read_bytes())
    with pytest.raises(
        ConfigError,
        match=r"tables/repo1 has no table files right under it, but its subfolder data does: "
        r"open .*repo1/data",
    ):
        s3_source(s3, f"{URL}/repo1")
    assert len(s3_source(s3, f"{URL}/repo/data/train-*.parquet")) == 2000
    body = (root / FILES[0]).read_bytes()
    _put(s3, "deep/default/train/0000.parquet", body)  # the Hub's parquet conversion
    with pytest.raises(ConfigError, match=r"tables/deep has no .* subfolder default does: open"):
        s3_source(s3, f"{URL}/deep")
    for name in ("a", "b"):
        _put(s3, f"parts/{name}/x.parquet", body)
    with pytest.raises(
        ConfigError,
        match=r"tables/parts .* subfolders a, b do: if they are separate datasets .* open one, "
        r"e\.g\. .*parts/a; if they are parts of one table, pass a glob such as "
        r"'.*parts/\*\*/\*\.parquet'",
    ):
        s3_source(s3, f"{URL}/parts")
    assert len(s3_source(s3, f"{URL}/parts/**/*.parquet")) == 4000
    # A null label: refused when the source is made (statistics, then that row group).
    labels = pa.array([None if i == 777 else i for i in range(1000)], pa.int64())
    sink = pa.BufferOutputStream()
    pq.write_table(pa.table({"label": labels}), sink, row_group_size=100)
    _put(s3, "nulls/n.parquet", sink.getvalue().to_pybytes())
    with pytest.raises(FormatError, match=r"nulls/n\.parquet: column 'label': row 777 is null"):
        TableSource(f"{URL}/nulls", columns=["label"], store_options=options(s3))


def test_one_read_fetches_all_its_row_groups_at_once(s3: S3Fixture, root: Path) -> None:
    # With 100 ms per request, one row group after another would never have two GETs
    # in flight; on an idle local endpoint a GET can end before the last one starts.
    with LatencyProxy(s3.server.endpoint, latency_ms=100) as slow:
        src = s3_source(s3, endpoint=slow.endpoint, shuffle=False)  # sample k is row k
        slow.reset_stats()
        out = src.read(0, np.arange(0, 3000, GROUP_ROWS))  # one row in each of 6 row groups
        assert out["label"].tolist() == list(range(0, 3000, GROUP_ROWS))
        assert src.table.decoded == 6
        # Not "== 6": a loaded machine may start the last after the first's 100 ms.
        assert slow.stats.requests >= 6 and slow.stats.max_in_flight >= 4
        src.close()


def test_a_full_shuffle_on_object_storage_warns_of_its_cost(s3: S3Fixture, root: Path) -> None:
    with pytest.warns(
        UserWarning, match=r"full shuffle .* whole row group .* shuffle='window'"
    ) as said:
        s3_source(s3, shuffle="full").close()
    assert said[0].filename == __file__  # s3_source()'s TableSource(...) line


def test_a_stalled_or_cut_get_is_retried_and_the_digest_holds(
    s3: S3Fixture, root: Path, proxy: LatencyProxy
) -> None:
    want = digest(lambda: TableSource(root, **KW), steps=20)
    quick = {**options(s3, proxy.endpoint), "retry": STALL_RETRY}
    for fault in (
        FaultRule(kind="stall", stall_s=STALL_S, match="GET /headrace-test/tables/", limit=1),
        FaultRule(kind="truncate", match="GET /headrace-test/tables/", limit=2),
    ):
        proxy.set_faults([fault])
        proxy.reset_stats()
        src = TableSource(URL, store_options=quick, **KW)
        assert digest(lambda src=src: src, steps=20) == want, fault.kind
        assert proxy.stats.faults == fault.limit
        # The fault may have met a read-ahead GET the 20 steps did not wait for: its retry
        # comes once its 2 s timeout has passed (seen once in a full run: retries 0, 3 in
        # flight).
        deadline = time.monotonic() + 30
        while (stats := src.object_stats) is None or stats.retries < 1:
            assert time.monotonic() < deadline, stats
            time.sleep(0.05)
        src.close()


def test_a_failed_read_ahead_is_fetched_again_when_a_batch_needs_it(
    s3: S3Fixture, root: Path, proxy: LatencyProxy
) -> None:
    local = TableSource(root, shuffle=False, **KW)
    src = s3_source(s3, endpoint=proxy.endpoint, shuffle=False)  # sample k is row k
    proxy.set_faults([FaultRule(kind="status", status=403, match="GET /headrace-test/tables/")])
    src.prefetch(0, np.arange(0, 64))  # row group 0, fetched ahead: fails
    pending = list(src.table._pending.values())
    assert len(pending) == 1 and pending[0].ahead
    with pytest.raises(PermissionDeniedError):
        pending[0].result()
    proxy.set_faults([])
    rows = np.arange(0, 64)
    assert np.array_equal(src.read(0, rows)["label"], local.read(0, rows)["label"])
    src.close()


def test_a_plain_http_url_reads_the_same_rows(s3: S3Fixture, root: Path) -> None:
    """``http://`` (moto answers plain GETs with ranges): one file by its URL, no listing."""
    s3.server.info.boto3_client().put_object(  # public: plain HTTP sends no credentials
        Bucket=BUCKET,
        Key=f"http/{FILES[1]}",
        Body=(root / FILES[1]).read_bytes(),
        ACL="public-read",
    )
    url = f"{s3.server.endpoint}/{BUCKET}/http/{FILES[1]}"
    kw = {**KW, "shuffle": "window"}
    want = digest(lambda: TableSource(root / FILES[1], **kw), steps=20)
    src = TableSource(url, store_options={"allow_http": True}, **kw)
    assert src.table.files == [(url, (root / FILES[1]).stat().st_size)]
    assert digest(lambda: src, steps=20) == want
    src.close()


def test_hosts_in_address_order_fetch_their_share_of_each_window(
    s3: S3Fixture, tmp_path: Path
) -> None:
    # 6,000 rows in row groups of 100, windows of 1,500 rows (15 groups), B=256. Split by
    # plan position, each of 8 hosts reads every group of every window (8 passes over the
    # file); split by address, a host's rows of a window lie in its eighth (and wander
    # with each sorted batch), so it fetches those groups and reads ahead only its stretch
    # of the next window: 3.3 passes measured, each host fetching the 22-27 of the 60
    # groups its own rows lie in.
    path = tmp_path / "many-groups.parquet"
    pq.write_table(_table(7, 6000), path, row_group_size=100)
    _put(s3, "hosts/many-groups.parquet", path.read_bytes())
    url = f"{URL}/hosts/many-groups.parquet"
    kw: dict[str, Any] = {**KW, "window_rows": 1500}

    def run(world: int, order: str) -> tuple[int, list[np.ndarray]]:
        fetched, per_host = 0, []
        for rank in range(world):
            src = TableSource(url, store_options=options(s3), **kw)
            with Loader(
                src,
                batch_size=256,
                seed=2,
                rank=rank,
                world_size=world,
                steps=6000 // 256,
                host_order=order,  # type: ignore[arg-type]
            ) as ld:
                per_host.append([b["label"].copy() for b in ld])
            stats = src.object_stats
            assert stats is not None
            fetched += stats.bytes
        steps = len(per_host[0])
        return fetched, [np.concatenate([h[t] for h in per_host]) for t in range(steps)]

    one_plan, plan_batches = run(1, "plan")
    by_plan, _ = run(8, "plan")
    by_address, address_batches = run(8, "address")
    assert by_plan >= 7 * one_plan
    assert by_address < 0.5 * by_plan, (by_address / one_plan, by_plan / one_plan)
    _, two = run(2, "address")
    for t in (0, 11, len(plan_batches) - 1):
        np.testing.assert_array_equal(address_batches[t], two[t])  # any host count
        np.testing.assert_array_equal(address_batches[t], np.sort(plan_batches[t]))


def test_a_table_closed_by_its_loader_reads_on_under_the_next(s3: S3Fixture, root: Path) -> None:
    # Each epoch of a TorchDataset closes its loader, and with it the source; the next
    # epoch's loader read through the closed request queue: "the request queue is closed".
    src = s3_source(s3, shuffle="window")
    want = batch_digest(Loader(s3_source(s3, shuffle="window"), batch_size=32, seed=5, steps=8))
    got = loaders_closing_between(src, batch_size=32, seed=5, steps=8)
    assert batch_digest(got) == want
    src.close()


def test_only_the_columns_read_are_fetched(s3: S3Fixture, tmp_path: Path) -> None:
    # A wide table as a feature store writes it: the columns read sit either side of a
    # 2 MiB-per-row-group text column (incompressible), which must stay unfetched.
    rng = np.random.default_rng(7)
    rows, group = 4000, 1000
    table = pa.table(
        {
            "label": np.arange(rows, dtype=np.int64),
            "text": pa.array([rng.bytes(2100) for _ in range(rows)], pa.binary()),
            "input_ids": pa.array(
                [rng.integers(0, 9, int(n)).astype(np.int32) for n in rng.integers(0, 40, rows)],
                pa.list_(pa.int32()),
            ),
        }
    )
    path = tmp_path / "wide.parquet"
    pq.write_table(table, path, row_group_size=group, compression="zstd")
    _put(s3, "wide/wide.parquet", path.read_bytes())
    meta = pq.ParquetFile(path).metadata
    asked = sum(
        meta.row_group(g).column(c).total_compressed_size
        for g in range(meta.num_row_groups)
        for c in (0, 2)
    )
    size = path.stat().st_size
    with Table.open(
        f"{URL}/wide/", columns=["label", "input_ids"], store_options=options(s3)
    ) as tb:
        got = tb.read_rows(list(range(rows - 1, -1, -3)))
        assert got["label"].tolist() == list(range(rows - 1, -1, -3))
        stats = tb.object_stats
        assert stats is not None and tb.misses == 0
        footer = min(size, 64 << 10)
        # The LIST, the footer, then each row group's two chunks: never the text between.
        assert stats.bytes <= footer + asked, (stats.bytes, footer, asked, size)
        assert stats.bytes < size / 20
