"""Objects changed under a running source on S3, on the read paths that had no such test.

Read paths (tests/_fault_cases.py): tar and TFRecord shards by members/records (ranged
GETs after the header walk) and whole (``shuffle="files"``), ArrayRecord by chunks, MDS
shards plain and zstd-compressed, Arrow IPC files under a TableSource, PNG files whole,
and NPY and NPZ rows by ranges. Once the source is open and has read other objects
clean, one object (the victim) is

- ``replaced``: written again with as many bytes, other ones (a new ETag);
- ``resized``: written again one byte longer;
- ``deleted``.

A changed object is refused naming it ("changed"), a deleted one is an
``ObjectNotFoundError`` naming it, and no read ever returns bytes of the new version: the
batches before the error are the local copy's. The other objects read on. GET faults
(5xx, cut bodies, stalls) are tests/integration/test_fault_matrix_s3_gets.py; the same
changes to local files, tests/formats/test_fault_matrix_local.py. The cells tested
elsewhere (tokens, rows, Parquet, HDF5 by ranges, whole NPZ and JPEG files, Megatron
indexes, the object cache) are not repeated here.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from s3util import BUCKET, FAST_RETRY, S3Fixture

from _fault_cases import CASES, build, digest, other_bytes, read
from headrace.errors import ObjectNotFoundError, StorageError

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Each case's local folder, written once (none where its library is missing)."""
    root = tmp_path_factory.mktemp("faultmatrix")
    return {name: root / name for name in CASES if build(name, root / name)}


def upload(s3: S3Fixture, root: Path, prefix: str) -> str:
    client = s3.server.info.boto3_client()
    for p in sorted(root.iterdir()):
        client.put_object(Bucket=BUCKET, Key=f"{prefix}/{p.name}", Body=p.read_bytes())
    return f"s3://{BUCKET}/{prefix}"


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("change", ["replaced", "resized", "deleted"])
def test_an_object_changed_mid_run_is_refused_naming_it_never_mixed(
    s3: S3Fixture, built: dict[str, Path], name: str, change: str
) -> None:
    case = CASES[name]
    if name not in built:
        pytest.skip(f"{case.needs} is not installed")
    root = built[name]
    prefix = f"faultmatrix/{name}/{change}"
    url = upload(s3, root, prefix)
    local = case.open(str(root), None)
    src = case.open(url, {**s3.options(), "retry": FAST_RETRY})
    try:
        clean, on = case.split(src, case.victim)
        assert clean.size and on.size
        assert read(src, clean[:8]) == read(local, clean[:8])
        client = s3.server.info.boto3_client()
        key = f"{prefix}/{case.victim}"
        if change == "deleted":
            client.delete_object(Bucket=BUCKET, Key=key)
            error: type[Exception] = ObjectNotFoundError
            said = "no such object"
        else:
            body = (root / case.victim).read_bytes()
            client.put_object(Bucket=BUCKET, Key=key, Body=other_bytes(body, change == "resized"))
            error, said = StorageError, "changed"
        want = read(local, on)
        got: list[str] = []
        with pytest.raises(error) as info:
            for i in range(0, on.size, 8):
                got.append(digest(src.read(0, on[i : i + 8])))
        # Whatever came before the error was the version the source opened.
        assert got == want[: len(got)]
        message = str(info.value)
        assert f"{prefix}/{case.victim}" in message, message
        assert said in message, message
        # The other objects still read.
        assert read(src, clean[-8:]) == read(local, clean[-8:])
    finally:
        src.close()
        local.close()
