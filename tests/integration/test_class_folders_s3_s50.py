"""A class folder with no file of the format, on object storage (moto on 127.0.0.1)
and in a local copy (``labels="folders"``): both refuse it, naming it, where the store
shows it (a console's folder marker ``bee/``, or objects of another format under it),
and give the same numbers where it does not (``aws s3 sync`` copies no empty folder:
the local copy less it) or where ``classes=[...]`` numbers the classes."""

from __future__ import annotations

from pathlib import Path

import pytest
from s3util import BUCKET, S3Fixture, store_options

from headrace.errors import DataError
from headrace.formats import FileSource, synthetic_arrays
from headrace.formats import write_sample_file as write

pytestmark = pytest.mark.integration

LAYOUT = {"ant": 2, "bee": 0, "cat": 2}


def upload(
    s3: S3Fixture, root: Path, prefix: str, layout: dict[str, int], fmt: str = "jpg"
) -> None:
    """``layout`` written under ``root`` and put under ``prefix``: a folder of no file as
    a marker ``x/`` where ``prefix`` ends in ``console``, else as nothing (a sync)."""
    client = s3.server.info.boto3_client()
    n = 0
    for folder, count in layout.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        if not count and prefix.endswith("console"):
            client.put_object(Bucket=BUCKET, Key=f"{prefix}/{folder}/", Body=b"")
        for i in range(count):
            path = root / folder / f"{i}.{fmt}"
            kind = "jpeg" if fmt == "jpg" else fmt
            write(kind, path, synthetic_arrays(kind, seed=n, shape=(8, 8, 3)))
            client.put_object(
                Bucket=BUCKET, Key=f"{prefix}/{folder}/{i}.{fmt}", Body=path.read_bytes()
            )
            n += 1


def test_a_marked_empty_class_folder_is_refused_as_locally(s3: S3Fixture, tmp_path: Path) -> None:
    upload(s3, tmp_path / "val", "s50/console", LAYOUT)
    url = f"s3://{BUCKET}/s50/console"
    for given in (tmp_path / "val", url):
        with pytest.raises(DataError) as exc:
            FileSource(
                given,
                format="jpeg",
                labels="folders",
                store_options=store_options(s3) if given == url else None,
            )
        said = str(exc.value)
        assert "1 class folder(s) hold no file to read: 'bee'" in said, said
        assert "remove it" in said and "classes=[...]" in said


def test_classes_given_number_alike_marked_or_synced(s3: S3Fixture, tmp_path: Path) -> None:
    upload(s3, tmp_path / "val", "s50/given/console", LAYOUT)
    upload(s3, tmp_path / "val", "s50/given/sync", LAYOUT)
    opts = store_options(s3)
    names = ["ant", "bee", "cat"]
    local = FileSource(tmp_path / "val", format="jpeg", labels="folders", classes=names)
    assert local.file_labels is not None and local.file_labels.tolist() == [0, 0, 2, 2]
    for where in ("console", "sync"):
        remote = FileSource(
            f"s3://{BUCKET}/s50/given/{where}",
            format="jpeg",
            labels="folders",
            classes=names,
            store_options=opts,
        )
        assert remote.classes == local.classes
        assert remote.file_labels is not None
        assert remote.file_labels.tolist() == local.file_labels.tolist()
        remote.close()
    # Synced, the empty folder is not there to see: the numbers of the copy less it.
    (tmp_path / "val" / "bee").rmdir()
    less = FileSource(tmp_path / "val", format="jpeg", labels="folders")
    synced = FileSource(
        f"s3://{BUCKET}/s50/given/sync", format="jpeg", labels="folders", store_options=opts
    )
    assert synced.classes == less.classes == ("ant", "cat")
    assert synced.file_labels is not None and less.file_labels is not None
    assert synced.file_labels.tolist() == less.file_labels.tolist() == [0, 0, 1, 1]
    synced.close()


def test_a_folder_of_another_format_only_is_refused_as_locally(
    s3: S3Fixture, tmp_path: Path
) -> None:
    upload(s3, tmp_path / "d", "s50/other", {"a": 1, "c": 1})
    upload(s3, tmp_path / "d", "s50/other", {"b": 1}, fmt="png")
    client = s3.server.info.boto3_client()
    (tmp_path / "d" / "README").write_bytes(b"")  # an empty file beside: no class
    client.put_object(Bucket=BUCKET, Key="s50/other/README", Body=b"")
    (tmp_path / "d" / ".cache").mkdir()  # hidden: no class
    client.put_object(Bucket=BUCKET, Key="s50/other/.cache/", Body=b"")
    url = f"s3://{BUCKET}/s50/other"
    for given in (tmp_path / "d", url):
        with pytest.raises(DataError, match=r"1 class folder\(s\) hold no file to read: 'b'"):
            FileSource(
                given,
                format="jpeg",
                labels="folders",
                store_options=store_options(s3) if given == url else None,
            )
    local = FileSource(tmp_path / "d", format="jpeg", labels="folders", classes=["a", "b", "c"])
    remote = FileSource(
        url,
        format="jpeg",
        labels="folders",
        classes=["a", "b", "c"],
        store_options=store_options(s3),
    )
    assert local.file_labels is not None and remote.file_labels is not None
    assert remote.file_labels.tolist() == local.file_labels.tolist() == [0, 2]
    remote.close()
