"""What a URL obstore cannot name is told (``headrace.io._object_names``)."""

from __future__ import annotations

import pytest

from headrace.errors import ConfigError
from headrace.io._object_names import refuse_dot_segment, unlistable


@pytest.mark.parametrize(
    ("path", "meant"),
    [
        ("../x.bin", "x.bin"),  # read "If you meant 's3://b/../x.bin'": the URL refused
        ("a/../../x.bin", "x.bin"),
        ("d/..", ""),  # read "If you meant 's3://b/.'", a dot segment again
        ("d/./x.bin", "d/x.bin"),
        ("e/sub/../x.bin", "e/x.bin"),
    ],
)
def test_the_url_a_dot_segment_is_told_to_mean_has_none(path: str, meant: str) -> None:
    url = f"s3://b/{path}"
    with pytest.raises(ConfigError, match=r"has a '\.\.?' path segment") as info:
        refuse_dot_segment(url, path)
    assert str(info.value).endswith(f"If you meant 's3://b/{meant}', write that")


@pytest.mark.parametrize(
    ("said", "key", "why"),
    [
        # obstore's words, as a listing on moto met these keys
        (
            'Encountered object with invalid path: Path "q/say "hi"//x.bin" contained '
            "empty path segment",
            'q/say "hi"//x.bin',
            "an empty path segment",
        ),
        (
            'Encountered object with invalid path: Error parsing Path "r/a "b" c/./x.bin": '
            'Encountered illegal character sequence "." whilst parsing path segment "."',
            'r/a "b" c/./x.bin',
            "a path segment '.'",
        ),
    ],
)
def test_a_key_with_quotes_obstore_cannot_list_is_named_whole(
    said: str, key: str, why: str
) -> None:
    # Named up to its first '"': "the listing holds 'q/say '", no such key.
    err = unlistable("s3://b/q", ValueError(said))
    assert f"the listing holds {key!r}, a name obstore cannot hold ({why}" in str(err)
