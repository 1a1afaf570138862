"""``headrace gen --root s3://...`` against a real S3 endpoint (moto), through the proxy.

Each dataset is generated to S3 and read back through headrace (the kind's
headrace variant over the objects); its batch digest must equal that of the
same workload generated to a local folder. A rerun writes nothing, a
truncated object is written again, and failures name the URL and exit 2.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from s3util import BUCKET, STALL_S, S3Fixture, StoreFactory, payload

from headrace.bench._kind import Kind, make_kind
from headrace.bench._upload import DIGEST_KEY
from headrace.bench._workload import load_workload
from headrace.cli import main
from headrace.emulate import FaultRule, LatencyProxy
from headrace.errors import ObjectNotFoundError, StorageError
from headrace.io import RetryPolicy
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

# A token file of 10.7 MB: two parts of a multipart upload (8 MiB each at most).
TOKENS = """
name = "gen-tokens"
kind = "tokens"
variants = ["headrace-sync"]
[dataset]
dtype = "uint16"
token_file_gib = 0.01
context = 64
[reader]
window_mib = 1
block_mib = 1
[train]
batch_size = 4
steps = 6
"""

JPEG = """
name = "gen-jpeg"
kind = "files"
variants = ["headrace"]
[dataset]
format = "jpeg"
files = 4
image_hw = [24, 32]
[reader]
in_flight = 4
[train]
batch_size = 2
steps = 4
"""

WORKLOADS = {"tokens": (TOKENS, "headrace-sync"), "jpeg": (JPEG, "headrace")}


def toml(tmp_path: Path, name: str) -> str:
    path = tmp_path / f"{name}.toml"
    path.write_text(WORKLOADS[name][0])
    return str(path)


def gen(workload: str, root: str, *extra: str) -> int:
    return main(["gen", workload, "--root", root, "-q", *extra])


def digest(kind: Kind, spec: str) -> str:
    with kind.serve():
        stream = kind.open(spec, kind.workload.train.steps)
        try:
            return batch_digest(stream)
        finally:
            stream.close()


def remote_kind(local: Kind, url: str, endpoint: str) -> Kind:
    """The dataset gen wrote, read as ``headrace bench --storage s3 --storage-url URL
    --endpoint E`` reads it (the objects are there already: nothing is uploaded)."""
    reader = {"storage": "s3", "storage_url": url, "endpoint": endpoint}
    return make_kind(local.workload.replace(reader=reader), local.root)


@pytest.fixture
def up(proxy: LatencyProxy, s3: S3Fixture) -> dict[str, Any]:
    """--endpoint through the proxy, and its store options for reading back."""
    return {"endpoint": proxy.endpoint, "options": {**s3.options(), "endpoint": proxy.endpoint}}


def no_writes() -> list[FaultRule]:
    # Any PUT (an object or a part) or POST (a multipart upload) fails: a rerun must send none.
    return [FaultRule(match="PUT ", status=500), FaultRule(match="POST ", status=500)]


@pytest.mark.parametrize("name", ["tokens", "jpeg"])
def test_gen_to_s3_reads_back_like_local_and_reruns_write_nothing(
    name: str,
    tmp_path: Path,
    s3: S3Fixture,
    proxy: LatencyProxy,
    up: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    wl = toml(tmp_path, name)
    spec = WORKLOADS[name][1]
    url = f"s3://{BUCKET}/gen-{name}"
    stage = str(tmp_path / "stage")
    assert gen(wl, url, "--endpoint", up["endpoint"], "--staging", stage) == 0
    out = capsys.readouterr().out
    kind = make_kind(load_workload(wl), stage)
    n = len(kind.dataset_files())  # tokens: the file and its sidecar
    assert f"{n} written" in out and "0 already there" in out
    assert f": {n} object{'' if n == 1 else 's'}, " in out

    assert gen(wl, str(tmp_path / "local")) == 0
    local = make_kind(load_workload(wl), str(tmp_path / "local"))
    # Where a files dataset lives: its folder's name under the prefix, as under a local root.
    sub = "" if name == "tokens" else "/" + Path(kind.folder).name  # type: ignore[attr-defined]
    # The output says where bench finds it (the folder's name was nowhere in it).
    bench_at = f"bench it with --storage s3 --storage-url {url + sub} --endpoint {up['endpoint']}"
    assert out.rstrip().endswith(bench_at), out
    remote = remote_kind(kind, url + sub, up["endpoint"])
    assert digest(remote, spec) == digest(local, spec)
    # And each object is the local file's bytes, tagged with their SHA-256.
    client = s3.server.info.boto3_client()
    for path in local.dataset_files():
        key = f"gen-{name}{sub}/{Path(path).name}"
        body = client.get_object(Bucket=BUCKET, Key=key)
        data = Path(path).read_bytes()
        assert body["Body"].read() == data
        assert body["Metadata"][DIGEST_KEY] == hashlib.sha256(data).hexdigest()

    proxy.set_faults(no_writes())
    proxy.reset_stats()
    assert gen(wl, url, "--endpoint", up["endpoint"], "--staging", stage) == 0
    assert f"0 written (0 bytes), {n} already there" in capsys.readouterr().out
    stats = proxy.stats
    assert stats.faults == 0
    assert stats.requests == 1 + n  # one listing, one metadata request per object


def test_truncated_or_foreign_objects_are_written_again(
    tmp_path: Path,
    s3: S3Fixture,
    proxy: LatencyProxy,
    up: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    wl = toml(tmp_path, "jpeg")
    url = f"s3://{BUCKET}/gen-redo"
    stage = str(tmp_path / "stage")
    args = ["--endpoint", up["endpoint"], "--staging", stage]
    assert gen(wl, url, *args) == 0
    kind = make_kind(load_workload(wl), stage)
    folder = Path(kind.folder).name  # type: ignore[attr-defined]
    files = [Path(p) for p in kind.files()]
    client = s3.server.info.boto3_client()
    key = [f"gen-redo/{folder}/{p.name}" for p in files]
    # Object 0 cut short (an interrupted copy by another tool); object 1 the right size,
    # other bytes and no digest (written by someone else).
    client.put_object(Bucket=BUCKET, Key=key[0], Body=files[0].read_bytes()[:100])
    client.put_object(Bucket=BUCKET, Key=key[1], Body=b"\0" * files[1].stat().st_size)
    capsys.readouterr()
    proxy.reset_stats()
    assert gen(wl, url, *args) == 0
    written = files[0].stat().st_size + files[1].stat().st_size
    out = capsys.readouterr().out
    assert f"2 written ({written:,} bytes), {len(files) - 2} already there" in out
    assert "(2 written over objects of another size or digest)" in out
    for k, p in zip(key[:2], files[:2], strict=True):
        assert client.get_object(Bucket=BUCKET, Key=k)["Body"].read() == p.read_bytes()


def test_large_token_file_goes_up_in_parts(
    tmp_path: Path, s3: S3Fixture, up: dict[str, Any]
) -> None:
    wl = toml(tmp_path, "tokens")
    stage = str(tmp_path / "stage")
    assert (
        gen(wl, f"s3://{BUCKET}/gen-parts", "--endpoint", up["endpoint"], "--staging", stage) == 0
    )
    kind = make_kind(load_workload(wl), stage)
    key = f"gen-parts/{Path(kind.files()[0]).name}"
    etag = s3.server.info.boto3_client().head_object(Bucket=BUCKET, Key=key)["ETag"]
    assert etag.strip('"').endswith("-2")  # 10.7 MB in parts of 8 MiB: a multipart upload


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_failures_name_the_url_and_exit_2(
    tmp_path: Path,
    proxy: LatencyProxy,
    up: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The default policy's tries, at a hundredth of its back-off: a 503 is a throttle,
    # retried 20 times beside the 5 attempts, and waited out 30 s of the suite's time.
    real_delay = RetryPolicy.delay_s
    monkeypatch.setattr(
        RetryPolicy, "delay_s", lambda self, retry, rng: real_delay(self, retry, rng) / 100
    )
    # And half a second of retrying refused connections, not the default 10 s.
    defaults = RetryPolicy.__init__.__kwdefaults__
    assert defaults is not None and defaults["connect_retry_s"] == 10.0
    monkeypatch.setitem(defaults, "connect_retry_s", 0.5)
    wl = toml(tmp_path, "jpeg")
    stage = ["--staging", str(tmp_path / "stage")]
    url = f"s3://{BUCKET}/gen-fail"

    assert gen(wl, url, "--endpoint", f"http://127.0.0.1:{closed_port()}", *stage) == 2
    err = capsys.readouterr().err
    assert f"headrace gen: {url}/" in err and "connection failed" in err
    assert "Traceback" not in err
    assert re.search(
        r"gave up after \d+ attempts in 0\.[3-5] s: connection failures are retried for up to "
        r"connect_retry_s=0\.5 s\)",
        err,
    ), err

    assert gen(wl, "s3://no-such-bucket-here/x", "--endpoint", up["endpoint"], *stage) == 2
    err = capsys.readouterr().err
    assert "s3://no-such-bucket-here/x: the bucket (or container) does not exist" in err

    proxy.set_faults([FaultRule(match="PUT ", status=403)])
    assert gen(wl, url, "--endpoint", up["endpoint"], *stage) == 2
    err = capsys.readouterr().err
    assert f"{url}/gen-jpeg-jpeg-4x1-" in err and "access denied" in err

    proxy.set_faults([FaultRule(match="PUT ", status=503)])
    assert gen(wl, url, "--endpoint", up["endpoint"], *stage) == 2
    err = capsys.readouterr().err
    assert "HTTP 503" in err and f"{url}/" in err
    assert "gave up after 5 attempts, 20 throttled tries" in err


def test_put_file_starts_over_after_a_failed_part(
    tmp_path: Path, proxy: LatencyProxy, open_store: StoreFactory, s3: S3Fixture
) -> None:
    src = tmp_path / "big.bin"
    data = payload(7, 10 * 1024 * 1024 + 5)  # two parts
    src.write_bytes(data)
    # Not under the session's shared prefix (data/), whose listing other tests compare.
    store = open_store(endpoint=proxy.endpoint, url=f"s3://{BUCKET}/gen-put")
    proxy.set_faults([FaultRule(match="PUT ", status=503, limit=1)])
    sent: list[int] = []
    info = store.put_file("put/big.bin", str(src), metadata={"k": "v"}, on_bytes=sent.append)
    assert proxy.stats.faults == 1 and store.stats.retries == 1
    assert info.size == len(data) and sum(sent) == len(data) and min(sent) < 0
    assert bytes(store.get("put/big.bin")) == data
    assert store.attributes("put/big.bin")["k"] == "v"
    # The failed attempt's multipart upload was aborted, not left to hold its parts.
    client = s3.server.info.boto3_client()
    assert client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []) == []


@pytest.mark.parametrize("size", [1000, 10 * 1024 * 1024 + 5], ids=["one-put", "multipart"])
def test_a_put_that_stalls_times_out_is_retried_then_named(
    tmp_path: Path, proxy: LatencyProxy, open_store: StoreFactory, s3: S3Fixture, size: int
) -> None:
    # A PUT the storage never answers (a stalled connection, a load balancer holding it)
    # is a timeout like a GET's: retried, and named with the key when the tries run out,
    # in seconds, not the 30 s the server stalls.
    src = tmp_path / "f.bin"
    data = payload(11, size)
    src.write_bytes(data)
    quick = RetryPolicy(attempts=2, base_delay_s=0.01, timeout_s=1.0)
    store = open_store(endpoint=proxy.endpoint, url=f"s3://{BUCKET}/gen-stall", retry=quick)
    proxy.set_faults([FaultRule(kind="stall", stall_s=STALL_S, match="PUT ", limit=1)])
    assert store.put_file("once.bin", str(src)).size == size
    assert store.stats.retries == 1 and bytes(store.get("once.bin")) == data
    proxy.set_faults([FaultRule(kind="stall", stall_s=STALL_S, match="PUT ")])
    t0 = time.monotonic()
    with pytest.raises(StorageError, match=rf"s3://{BUCKET}/gen-stall/never\.bin.*timed out"):
        store.put_file("never.bin", str(src))
    assert time.monotonic() - t0 < STALL_S / 2  # a bound on the wait, not a measurement
    with pytest.raises(ObjectNotFoundError):
        store.get("never.bin")  # nothing half-written is left to read
    uploads = s3.server.info.boto3_client().list_multipart_uploads(Bucket=BUCKET)
    assert [u["Key"] for u in uploads.get("Uploads", []) if "gen-stall" in u["Key"]] == []


def test_the_workloads_reader_section_gives_the_endpoint(
    tmp_path: Path, up: dict[str, Any], s3: S3Fixture, capsys: pytest.CaptureFixture[str]
) -> None:
    wl = tmp_path / "reader.toml"
    wl.write_text(
        JPEG.replace("[reader]\n", f'[reader]\nstorage = "s3"\nendpoint = "{up["endpoint"]}"\n')
    )
    url = f"s3://{BUCKET}/gen-reader"
    assert gen(str(wl), url, "--staging", str(tmp_path / "stage")) == 0
    assert "4 written" in capsys.readouterr().out
    listed = s3.server.info.boto3_client().list_objects_v2(Bucket=BUCKET, Prefix="gen-reader/")
    assert len(listed["Contents"]) == 4


def bench(workload: str, *extra: str) -> int:
    return main(["bench", "-w", workload, "--no-isolate", "-q", "--trials", "1", "--steps", "1",
                 "--warmup", "0", *extra])  # fmt: skip


@pytest.mark.parametrize("foreign", ["more-files", "another-jpeg"])
def test_bench_refuses_a_prefix_holding_files_not_its_datasets(
    foreign: str,
    tmp_path: Path,
    s3: S3Fixture,
    up: dict[str, Any],
    capsys: pytest.CaptureFixture[str],
) -> None:
    # gen writes 4 JPEGs; a bench run of 2 files pointed at that folder would upload its 2
    # (kept: the same bytes) and list the prefix: its readers would read all 4, on a plan of 2.
    wl = toml(tmp_path, "jpeg")
    url = f"s3://{BUCKET}/mixed-{foreign}"
    stage = str(tmp_path / "stage")
    assert gen(wl, url, "--endpoint", up["endpoint"], "--staging", stage) == 0
    folder = Path(make_kind(load_workload(wl), stage).folder).name  # type: ignore[attr-defined]
    files = "4"
    if foreign == "another-jpeg":
        client = s3.server.info.boto3_client()
        client.put_object(Bucket=BUCKET, Key=f"mixed-{foreign}/{folder}/x/cat.JPG", Body=b"x")
        client.put_object(Bucket=BUCKET, Key=f"mixed-{foreign}/{folder}/README.txt", Body=b"y")
    else:
        files = "2"
    capsys.readouterr()
    target = f"{url}/{folder}"
    rc = bench(wl, "--files", files, "--storage-url", target, "--endpoint", up["endpoint"],
               "--root", stage)  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2
    extra = "0000002.jpg" if foreign == "more-files" else "x/cat.JPG"
    assert target in err and extra in err and "README.txt" not in err
    read = int(files) + (2 if foreign == "more-files" else 1)
    assert f"({files} files)" in err and f"read {read} files on a plan of {files}" in err
    if foreign == "more-files":  # nothing was written there: refused before the upload
        client = s3.server.info.boto3_client()
        listed = client.list_objects_v2(Bucket=BUCKET, Prefix=f"mixed-{foreign}/")
        assert len(listed["Contents"]) == 4


def test_bench_against_an_endpoint_that_is_down_names_it_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The bucket check before the upload went through boto3, unmapped: a traceback after
    # 14 s of botocore's retries.
    endpoint = f"http://127.0.0.1:{closed_port()}"
    wl = toml(tmp_path, "jpeg")
    rc = bench(wl, "--storage-url", f"s3://{BUCKET}/down", "--endpoint", endpoint,
               "--root", str(tmp_path / "stage"))  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2
    assert "Traceback" not in err
    assert f"s3://{BUCKET} at {endpoint}: cannot reach the endpoint" in err
    # where the endpoint may come from (a DLIO YAML's endpoint_url was told "check
    # --endpoint", a flag the run had not been given)
    assert "give the one to use with --endpoint (it replaces a workload's [reader]" in err


def test_bench_names_the_objects_it_replaces_at_a_storage_url(
    tmp_path: Path, up: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    # gen's JPEGs benched with another image size: the run serves its own dataset, so it
    # writes its files over gen's objects of the same names. That is said, not done silently.
    wl = toml(tmp_path, "jpeg")
    url = f"s3://{BUCKET}/replaced"
    stage = str(tmp_path / "stage")
    assert gen(wl, url, "--endpoint", up["endpoint"], "--staging", stage) == 0
    target = f"{url}/{Path(make_kind(load_workload(wl), stage).folder).name}"  # type: ignore[attr-defined]
    other = tmp_path / "other.toml"
    other.write_text(JPEG.replace("[24, 32]", "[32, 24]"))
    capsys.readouterr()
    args = ("--storage-url", target, "--endpoint", up["endpoint"], "--root", stage)
    assert bench(str(other), *args) == 0
    err = capsys.readouterr().err
    assert f"{target}: 4 objects written" in err
    assert "4 written over objects of another size or digest" in err
    assert bench(str(other), *args) == 0  # and a rerun finds them there
    assert f"{target}: 0 objects written (0 bytes), 4 already there" in capsys.readouterr().err


def test_bench_puts_its_latency_proxy_in_front_of_an_existing_endpoint(
    tmp_path: Path, s3: S3Fixture, capsys: pytest.CaptureFixture[str]
) -> None:
    # --latency-ms with --endpoint: the run's own proxy stands in front of the endpoint
    # given (moto here, as a user's MinIO), every request goes through it, and the
    # batches are those read without it.
    wl = toml(tmp_path, "jpeg")
    stage = str(tmp_path / "stage")
    folder = Path(make_kind(load_workload(wl), stage).folder).name  # type: ignore[attr-defined]
    target = f"s3://{BUCKET}/latency/{folder}"
    runs = {}
    for ms in ("0", "20"):
        out = tmp_path / f"r{ms}.json"
        args = ("--storage-url", target, "--endpoint", s3.server.endpoint, "--root", stage)
        assert bench(wl, *args, "--latency-ms", ms, "--json", str(out)) == 0
        runs[ms] = (json.loads(out.read_text()), capsys.readouterr().out)
    (plain, _), (slow, said) = runs["0"], runs["20"]
    assert slow["workloads"][0]["s3"] == {
        "url": target,
        "endpoint": s3.server.endpoint,
        "latency_ms": 20.0,
        "max_concurrent": None,
    }
    assert f"at {s3.server.endpoint}" in said and "20 ms added to each request" in said
    (a,), (b,) = plain["results"], slow["results"]
    assert b["latency_ms"] == 20 and b["digest"] == a["digest"]
    # Every request waited at the proxy: the store's own latencies say so.
    assert b["request_latency_s"]["p50"] >= 0.020
