"""``headrace gen --root URL``'s upload: the digest cache and objects kept (s48)."""

from __future__ import annotations

import os
from pathlib import Path

from headrace.bench._upload import DigestCache, upload_files
from headrace.io import ObjectStore


def test_a_file_rewritten_at_its_size_and_mtime_is_uploaded_again(tmp_path: Path) -> None:
    """A file changed in place at its size, its mtime set back (``cp -p``, ``rsync -t``,
    ``touch -r``): the cached digest, keyed by size and mtime alone, was the old file's,
    the stale object matched it and was kept."""
    a = tmp_path / "a.bin"
    a.write_bytes(b"a" * 100)
    with ObjectStore("memory://") as store:
        upload_files(store, [("x/a.bin", str(a))], digests=DigestCache.under(str(tmp_path)))
        st = a.stat()
        a.write_bytes(b"b" * 100)
        os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
        done = upload_files(store, [("x/a.bin", str(a))], digests=DigestCache.under(str(tmp_path)))
        assert (done.written, done.skipped, done.replaced) == (1, 0, 1)
        assert bytes(store.get("x/a.bin")) == b"b" * 100
        # Unchanged since: kept, from the cache.
        done = upload_files(store, [("x/a.bin", str(a))], digests=DigestCache.under(str(tmp_path)))
        assert (done.written, done.skipped) == (0, 1)


def test_empty_files_go_up_and_are_kept_on_a_rerun(tmp_path: Path) -> None:
    z = tmp_path / "z.bin"
    z.write_bytes(b"")
    for url in ("memory://", (tmp_path / "dst").as_uri()):
        (tmp_path / "dst").mkdir(exist_ok=True)
        with ObjectStore(url) as store:
            done = upload_files(store, [("x/z.bin", str(z))], digests=DigestCache(None))
            assert (done.written, done.bytes_written) == (1, 0)
            assert bytes(store.get("x/z.bin")) == b""
            done = upload_files(store, [("x/z.bin", str(z))], digests=DigestCache(None))
            assert (done.written, done.skipped) == (0, 1)
