"""An object-store glob's extension matches case by case, as a local glob's does; the
objects it misses only by that case are counted and told, as a local glob's are
(``tests/formats/test_glob_case_s53.py``), on moto. Until 2026-12-07
``s3://b/train/*/*.jpg`` left ``.JPG`` objects out in silence: a class of ``.JPG`` photos
alone had no number, and every class after it was numbered one lower than a listing of
the prefix (and torchvision's ``ImageFolder``) numbers it.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from s3util import S3Fixture

from headrace.formats import FileSource

Image = pytest.importorskip("PIL.Image")

pytestmark = pytest.mark.integration

BUCKET = "headrace-glob-case"


def _jpeg(value: int) -> bytes:
    out = io.BytesIO()
    Image.fromarray(np.full((8, 8, 3), value, np.uint8)).save(out, format="JPEG")
    return out.getvalue()


@pytest.fixture(scope="module")
def opts(s3: S3Fixture) -> Iterator[dict[str, object]]:
    s3.server.create_bucket(BUCKET)
    client = s3.server.info.boto3_client()
    for key, v in (
        ("train/ant/0.jpg", 0),
        ("train/bee/0.JPG", 1),  # a class of .JPG files only
        ("train/bee/1.Jpg", 2),
        ("train/cat/0.jpg", 3),
        ("train/cat/1.jpeg", 4),  # another extension: not this pattern's
    ):
        client.put_object(Bucket=BUCKET, Key=key, Body=_jpeg(v))
    yield s3.options()


def test_an_object_glob_tells_the_objects_its_extension_case_misses(
    opts: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    url = f"s3://{BUCKET}/train/*/*.jpg"
    # (The class folder it skips is warned of too, as locally: test_image_more_s54.py.)
    with caplog.at_level("WARNING", logger="headrace"), pytest.warns(UserWarning, match="'bee'"):
        src = FileSource(url, format="jpeg", labels="folders", store_options=opts)
    # What the glob matches, as before: the pattern's meaning is kept.
    assert sorted(src.files.keys) == ["ant/0.jpg", "cat/0.jpg"]
    assert src.classes == ("ant", "cat")
    said = (
        f"left out 2 file(s) that the glob pattern {url} misses only by the case of its "
        f"extension (e.g. 's3://{BUCKET}/train/bee/0.JPG')"
    )
    assert src.files.other == 2 and said in caplog.text, caplog.text
    assert "[jJ][pP][gG]" in caplog.text
    src.close()
    # Written to match either case, every one is read (as the prefix reads them), unsaid.
    caplog.clear()
    with caplog.at_level("WARNING", logger="headrace"):
        both = FileSource(
            f"s3://{BUCKET}/train/*/*.[jJ][pP][gG]", format="jpeg", labels="folders",
            store_options=opts,
        )  # fmt: skip
    assert both.classes == ("ant", "bee", "cat") and len(both.files) == 4
    assert both.files.other == 0 and "left out" not in caplog.text
    both.close()


def test_a_list_of_object_globs_tells_them_too(
    opts: dict[str, object], caplog: pytest.LogCaptureFixture
) -> None:
    ant, firsts = f"s3://{BUCKET}/train/ant/*.jpg", f"s3://{BUCKET}/train/*/0.jpg"
    cat = f"s3://{BUCKET}/train/cat/1.jpeg"
    with caplog.at_level("WARNING", logger="headrace"):
        src = FileSource([ant, cat], format="jpeg", store_options=opts)
    assert src.files.other == 0 and "left out" not in caplog.text
    src.close()
    with caplog.at_level("WARNING", logger="headrace"):
        src = FileSource([firsts, cat], format="jpeg", store_options=opts)
    assert sorted(src.files.keys) == ["ant/0.jpg", "cat/0.jpg", "cat/1.jpeg"]
    assert src.files.other == 1
    said = f"left out 1 file(s) that the glob pattern {firsts} misses only by the case"
    assert said in caplog.text and "train/bee/0.JPG" in caplog.text, caplog.text
    src.close()


def test_a_glob_that_matches_only_by_case_says_so(opts: dict[str, object], tmp_path: Path) -> None:
    """A folder of ``.JPG`` photos globbed as ``*.jpg``: "no objects match" (with the count
    listed) was all it said; the objects it missed by case are named, locally alike."""
    from headrace.errors import ObjectNotFoundError

    url = f"s3://{BUCKET}/train/bee/*.jpg"
    with pytest.raises(ObjectNotFoundError) as got:
        FileSource(url, format="jpeg", store_options=opts)
    said = (
        "; 2 file(s) match it but for the case of their extension (e.g. "
        f"'s3://{BUCKET}/train/bee/0.JPG'): write the extension as .[jJ][pP][gG] to read them"
    )
    assert f"{url}: no objects match this glob pattern" in str(got.value)
    assert said in str(got.value), got.value
    (tmp_path / "0.JPG").write_bytes(_jpeg(1))
    with pytest.raises(ObjectNotFoundError) as got:
        FileSource(f"{tmp_path}/*.jpg", format="jpeg")
    assert f"1 file(s) match it but for the case of their extension (e.g. '{tmp_path}/0.JPG')" in (
        str(got.value)
    )
