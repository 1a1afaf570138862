"""``headrace gen --root s3://...``'s upload against moto: empty files, a local file
changed in place, an upload stopped part-way and run again (s48)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from s3util import StoreFactory

from headrace.bench._upload import DIGEST_KEY, DigestCache, upload_files

pytestmark = pytest.mark.integration


def test_empty_and_changed_files_on_s3(tmp_path: Path, open_store: StoreFactory) -> None:
    store = open_store(url=f"{open_store().url.rstrip('/')}/s48-upload-{os.getpid()}")
    z, a = tmp_path / "z.bin", tmp_path / "a.bin"
    z.write_bytes(b"")
    a.write_bytes(b"a" * 1000)
    files = [("d/z.bin", str(z)), ("d/a.bin", str(a))]
    done = upload_files(store, files, digests=DigestCache.under(str(tmp_path)))
    assert (done.written, done.bytes_written) == (2, 1000)
    assert bytes(store.get("d/z.bin")) == b"" and len(store.attributes("d/z.bin")[DIGEST_KEY]) == 64
    done = upload_files(store, files, digests=DigestCache.under(str(tmp_path)))
    assert (done.written, done.skipped) == (0, 2)
    # Changed in place at its size, its mtime set back: written again.
    st = a.stat()
    a.write_bytes(b"b" * 1000)
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    done = upload_files(store, files, digests=DigestCache.under(str(tmp_path)))
    assert (done.written, done.skipped, done.replaced) == (1, 1, 1)
    assert bytes(store.get("d/a.bin")) == b"b" * 1000


def test_an_upload_stopped_part_way_sends_only_the_rest(
    tmp_path: Path, open_store: StoreFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = open_store(url=f"{open_store().url.rstrip('/')}/s48-resume-{os.getpid()}")
    files = []
    for i in range(6):
        p = tmp_path / f"f{i}.bin"
        p.write_bytes(bytes([i]) * (100 + i))
        files.append((f"d/f{i}.bin", str(p)))
    real = type(store).put_file
    sent: list[str] = []

    def stops_after_three(self: object, key: str, *args: object, **kw: object) -> None:
        if len(sent) >= 3:
            raise KeyboardInterrupt  # fault injection: Ctrl-C part-way
        sent.append(key)
        real(self, key, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(type(store), "put_file", stops_after_three)
    with pytest.raises(KeyboardInterrupt):
        upload_files(store, files, digests=DigestCache.under(str(tmp_path)), threads=1)
    monkeypatch.undo()
    done = upload_files(store, files, digests=DigestCache.under(str(tmp_path)))
    assert (done.written, done.skipped) == (3, 3)
    for key, path in files:
        assert bytes(store.get(key)) == Path(path).read_bytes()
