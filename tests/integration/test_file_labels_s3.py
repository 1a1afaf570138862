"""``labels=`` on object storage (moto on 127.0.0.1): a prefix, a glob and a list of
object URLs give their files the classes a local copy's folders (or a mapping) give."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from s3util import BUCKET, S3Fixture, store_options

from headrace.formats import FileSource, synthetic_arrays
from headrace.formats import write_sample_file as write
from headrace.pipeline import Loader
from headrace.testing import batch_digest

pytestmark = pytest.mark.integration

LAYOUT = {"dog": 3, "cat": 2, "cat/kitten": 2, "ant": 2}


@pytest.fixture(scope="module")
def folders(s3: S3Fixture, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("labels") / "train"
    client = s3.server.info.boto3_client()
    n = 0
    for folder, count in LAYOUT.items():
        (root / folder).mkdir(parents=True)
        for i in range(count):
            path = root / folder / f"{i}.jpg"
            write("jpeg", path, synthetic_arrays("jpeg", seed=n, shape=(8, 8, 3)))
            client.put_object(
                Bucket=BUCKET, Key=f"labels/train/{folder}/{i}.jpg", Body=path.read_bytes()
            )
            n += 1
    return root


def digest(src: FileSource) -> str:
    with Loader(src, batch_size=3, seed=4, steps=6) as loader:
        return batch_digest(loader)


def test_a_prefix_labels_as_its_local_copy(s3: S3Fixture, folders: Path) -> None:
    opts = store_options(s3)
    local = FileSource(folders, format="jpeg", labels="folders")
    remote = FileSource(
        f"s3://{BUCKET}/labels/train/", format="jpeg", labels="folders", store_options=opts
    )
    assert remote.classes == local.classes == ("ant", "cat", "dog")
    np.testing.assert_array_equal(remote.file_labels, local.file_labels)
    assert list(remote.files.keys) == list(local.files.keys)
    assert digest(remote) == digest(local)
    for s in (local, remote):
        s.close()


def test_a_glob_and_a_list_of_urls_take_each_files_folder(s3: S3Fixture, folders: Path) -> None:
    opts = store_options(s3)
    globbed = FileSource(
        f"s3://{BUCKET}/labels/train/*/*.jpg", format="jpeg", labels="folders", store_options=opts
    )
    assert globbed.classes == ("ant", "cat", "dog")
    np.testing.assert_array_equal(globbed.file_labels, [0, 0, 1, 1, 2, 2, 2])
    globbed.close()
    # One class's objects: their folder, though it is the root the keys are under.
    urls = [f"s3://{BUCKET}/labels/train/cat/kitten/{i}.jpg" for i in range(2)]
    kittens = FileSource(
        urls, format="jpeg", labels="folders", classes=["cat", "kitten"], store_options=opts
    )
    np.testing.assert_array_equal(kittens.file_labels, [1, 1])
    with Loader(kittens, batch_size=2, seed=0, steps=1) as loader:
        np.testing.assert_array_equal(next(iter(loader))["label"], [1, 1])
    kittens.close()


def test_a_mapping_names_objects_by_their_keys_or_urls(s3: S3Fixture, folders: Path) -> None:
    # Under a prefix, the keys below it (as a local folder's names); a list of URLs, the
    # URLs as listed.
    opts = store_options(s3)
    prefix = f"s3://{BUCKET}/labels/train/"
    local = FileSource(folders, format="jpeg", labels="folders")
    assert local.classes is not None and local.file_labels is not None
    named = {k: local.classes[c] for k, c in zip(local.files.keys, local.file_labels, strict=True)}
    remote = FileSource(prefix, format="jpeg", labels=named, store_options=opts)
    assert remote.classes == local.classes
    np.testing.assert_array_equal(remote.file_labels, local.file_labels)
    assert digest(remote) == digest(local)
    urls = {prefix + k: c for k, c in named.items()}
    listed = FileSource(sorted(urls), format="jpeg", labels=urls, store_options=opts)
    np.testing.assert_array_equal(listed.file_labels, local.file_labels)
    for s in (local, remote, listed):
        s.close()
