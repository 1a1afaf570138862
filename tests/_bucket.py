"""A module's S3 bucket on a moto server of its own (headrace.emulate.LocalS3)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest


def bucket_fixture(bucket: str) -> Callable[..., Any]:
    """A module-scoped fixture: a moto server on 127.0.0.1 holding ``bucket`` (empty),
    skipped where moto is not installed. ``s3 = bucket_fixture("name")`` in a module."""

    @pytest.fixture(scope="module")
    def s3() -> Iterator[Any]:
        pytest.importorskip("moto")
        from headrace.emulate import LocalS3

        with LocalS3() as server:
            server.create_bucket(bucket)
            yield server

    return s3
