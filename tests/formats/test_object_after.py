"""A listed shard's range read waits for the check of its first bytes (``_after``):
whichever of the two fails or is cancelled (a source closed mid-read), the read
settles with an error naming the object, never leaving its reader waiting."""

from __future__ import annotations

import errno
from concurrent.futures import Future

import pytest

from headrace.errors import StorageError
from headrace.formats._object_files import _after

URL = "s3://bucket/shard-0.bin"


def running() -> Future[None]:
    f: Future[None] = Future()
    f.set_running_or_notify_cancel()
    return f


def test_the_read_is_given_as_is_when_the_check_has_passed() -> None:
    read, head = running(), running()
    head.set_result(None)
    assert _after(read, head, URL) is read


def test_the_read_settles_only_once_the_check_has_and_takes_its_error_first() -> None:
    read, head = running(), running()
    done = _after(read, head, URL)
    read.set_exception(StorageError(errno.EIO, "read failed"))
    assert not done.done()
    head.set_exception(StorageError(errno.EIO, f"{URL}: not a token file"))
    with pytest.raises(StorageError, match="not a token file"):
        done.result(timeout=1)


@pytest.mark.parametrize("cancelled", ["read", "head", "both"])
def test_a_cancelled_request_settles_the_read_with_an_error_naming_the_object(
    cancelled: str,
) -> None:
    read: Future[None] = Future() if cancelled != "head" else running()
    head: Future[None] = Future() if cancelled != "read" else running()
    done = _after(read, head, URL)
    for f in (read, head):
        if not f.cancel():  # running: it finishes instead
            f.set_result(None)
    with pytest.raises(StorageError, match=f"{URL}: a read was cancelled") as caught:
        done.result(timeout=1)  # hung here when the check was cancelled
    assert caught.value.errno == errno.ECANCELED


def test_a_check_cancelled_before_the_read_is_asked_for_is_an_error() -> None:
    head: Future[None] = Future()
    head.cancel()
    read = running()
    done = _after(read, head, URL)
    read.set_result(None)
    with pytest.raises(StorageError, match="a read was cancelled"):
        done.result(timeout=1)
