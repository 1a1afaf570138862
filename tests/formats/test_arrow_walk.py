"""The IPC header walk (tables on object storage) on damaged bytes: a FormatError or a
correct index, never another exception. The walk is fed from memory here (the object
store's part is tested in tests/integration/test_arrow_s3.py)."""

from __future__ import annotations

import random
from concurrent.futures import Future
from typing import Any

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")

from headrace.errors import FormatError  # noqa: E402
from headrace.formats._arrow_remote import _Walk  # noqa: E402


class _Bytes:
    """A RemoteFile stand-in over bytes in memory (fault injection: the bytes are damaged)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def read_into(self, out: np.ndarray, offset: int) -> Future[None]:
        out[:] = np.frombuffer(self.data[offset : offset + out.size], np.uint8)
        done: Future[None] = Future()
        done.set_result(None)
        return done


def _ipc(file: bool, legacy: bool = False) -> tuple[bytes, pa.Table]:
    table = pa.table(
        {
            "ids": pa.array([[1, 2, 3]] * 300, pa.list_(pa.int32())),
            "n": np.arange(300),
            "s": pa.array([None if i % 7 == 0 else str(i) for i in range(300)]),
        }
    )
    sink = pa.BufferOutputStream()
    options = pa.ipc.IpcWriteOptions(use_legacy_format=legacy)
    with (pa.ipc.new_file if file else pa.ipc.new_stream)(sink, table.schema, options=options) as w:
        w.write_table(table, max_chunksize=50)
    return bytes(sink.getvalue()), table


def _walk(data: bytes) -> Any:
    return _Walk("s3://b/t.arrow", _Bytes(data), len(data)).index(pa)


@pytest.mark.parametrize(
    ("file", "legacy"),
    [(False, False), (True, False), (False, True)],
    ids=["stream", "file", "stream-before-arrow-0.15"],
)
def test_the_walk_indexes_what_pyarrow_reads(file: bool, legacy: bool) -> None:
    data, table = _ipc(file, legacy)
    if legacy:  # messages without the continuation marker: the length comes first
        assert data[:4] != b"\xff\xff\xff\xff"
    index = _walk(data)
    assert index.rows == [50] * 6
    nulls = index.nulls
    assert nulls[:, 2].tolist() == [
        sum(1 for i in range(k, k + 50) if i % 7 == 0) for k in range(0, 300, 50)
    ]
    assert not nulls[:, :2].any()
    for (offset, length), rows in zip(index.spans, index.rows, strict=True):
        batch = pa.ipc.read_record_batch(pa.py_buffer(data[offset : offset + length]), table.schema)
        assert batch.num_rows == rows


@pytest.mark.parametrize("file", [False, True], ids=["stream", "file"])
def test_damaged_headers_are_format_errors_never_another_exception(file: bool) -> None:
    good, _ = _ipc(file)
    rng = random.Random(7)
    refused = 0
    for _ in range(400):
        data = bytearray(good)
        how = rng.randrange(3)
        if how == 0:
            for _ in range(rng.randrange(1, 5)):
                data[rng.randrange(len(data))] = rng.randrange(256)
        elif how == 1:
            data = data[: rng.randrange(len(data))]
        else:
            at = rng.randrange(len(data))
            data[at : at + 8] = bytes(rng.randrange(256) for _ in range(8))
        try:
            _walk(bytes(data))
        except FormatError as exc:
            assert str(exc).startswith("s3://b/t.arrow: ")
            refused += 1
    assert refused > 100  # most damage is caught here; a body's is caught when decoded


def _messages(data: bytes) -> list[bytes]:
    """A stream's messages (continuation, length, header, body), up to its end marker."""
    from headrace.formats._arrow_format import _Flat

    out, at = [], 0
    while True:
        length = int.from_bytes(data[at + 4 : at + 8], "little", signed=True)
        if length == 0:
            return out
        body = _Flat(data[at + 8 : at + 8 + length]).scalar(_Flat(data[at + 8 :]).root(), 3, "<q")
        out.append(data[at : at + 8 + length + body])
        at += 8 + length + body


END = b"\xff\xff\xff\xff\x00\x00\x00\x00"


@pytest.mark.parametrize(
    ("damage", "match"),
    [
        (
            lambda m: m[0] + b"\xff\xff\xff\xff\x10\x00",  # a continuation, half a length
            r"truncated Arrow IPC stream at byte \d+$",
        ),
        (lambda m: END, r"an Arrow IPC stream without a schema message$"),
        (
            lambda m: m[0] + m[0] + b"".join(m[1:]) + END,
            r"corrupt Arrow IPC message at byte \d+: a second schema message$",
        ),
        (
            lambda m: b"".join(m[1:]) + END,
            r"corrupt Arrow IPC message at byte 0: a record batch before the schema",
        ),
    ],
    ids=["cut-in-length", "end-marker-only", "two-schemas", "no-schema-first"],
)
def test_streams_with_messages_cut_missing_or_out_of_order(damage: Any, match: str) -> None:
    messages = _messages(_ipc(False)[0])
    assert len(messages) == 7  # the schema, then 6 record batches
    with pytest.raises(FormatError, match=r"^s3://b/t\.arrow: " + match):
        _walk(damage(messages))


def _big(sizes: list[int], seed: int = 0, vary: bool = True) -> bytes:
    """A stream of record batches of about ``sizes`` bytes each (text of random lengths,
    or of 1,000 bytes each when not ``vary``: more than the walk's 64 KiB step, so each
    header is a GET of its own without guesses)."""
    rng = np.random.default_rng(seed)
    schema = pa.schema([("text", pa.string()), ("id", pa.int64())])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as w:
        for k, size in enumerate(sizes):
            n = size // 1000
            lens = rng.integers(200, 1800, n) if vary else [1000] * n
            text = pa.array(["x" * int(m) for m in lens])
            w.write_batch(pa.record_batch([text, pa.array(np.arange(n) + k)], schema=schema))
    return bytes(sink.getvalue())


class _Counted(_Bytes):
    """The stand-in, counting reads; those at offsets in ``fail`` raise (a guessed GET
    the store refused)."""

    def __init__(self, data: bytes, fail: frozenset[int] = frozenset()) -> None:
        super().__init__(data)
        self.fail = fail
        self.reads: list[int] = []
        self.sizes: list[int] = []

    def read_into(self, out: np.ndarray, offset: int) -> Future[None]:
        self.reads.append(offset)
        self.sizes.append(out.size)
        if offset in self.fail:
            from headrace.errors import StorageError

            done: Future[None] = Future()
            done.set_exception(StorageError(5, f"s3://b/t.arrow: bytes at {offset}: refused"))
            return done
        return super().read_into(out, offset)


def _index_of(data: bytes, guess: bool, monkeypatch: pytest.MonkeyPatch, file: Any = None) -> Any:
    import headrace.formats._arrow_remote as remote

    monkeypatch.setattr(remote, "GUESS", guess)
    walk = _Walk("s3://b/t.arrow", file or _Counted(data), len(data))
    index = walk.index(pa)
    return walk, index


def _same(a: Any, b: Any) -> None:
    assert a.spans == b.spans and a.heads == b.heads and a.rows == b.rows
    assert a.schema_message == b.schema_message
    np.testing.assert_array_equal(a.nulls, b.nulls)
    np.testing.assert_array_equal(a.columns, b.columns)
    for x, y in zip(a.buffers, b.buffers, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize(
    ("sizes", "vary"),
    [
        ([200_000] * 40, False),
        ([200_000] * 40, True),
        ([180_000, 230_000, 200_000, 170_000] * 10, True),
        ([100_000, 400_000, 150_000, 90_000] * 10, True),
        ([2_000] * 50 + [300_000] * 20, True),
    ],
    ids=["uniform", "text", "mixed", "too-mixed-to-guess", "small-then-large"],
)
def test_guessed_headers_give_the_index_the_walk_alone_gives(
    sizes: list[int], vary: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import headrace.formats._arrow_remote as remote

    data = _big(sizes, vary=vary)
    alone, want = _index_of(data, False, monkeypatch)
    guessed, got = _index_of(data, True, monkeypatch)
    _same(got, want)
    assert alone.guesses is None and guessed.guesses is not None
    # Sizes that vary by more than GUESS_SPREAD are not guessed.
    assert (guessed.guesses.most == 0) == (max(sizes[:4]) - min(sizes[:4]) > 200_000)
    assert guessed.guesses.most <= remote.GUESS_AHEAD
    if not vary:  # sizes all the same: every header after the first GUESS_AFTER + 1, and
        # the end-of-stream marker, read from a guess
        assert guessed.guesses.hits == len(sizes) - remote.GUESS_AFTER
    elif sizes[0] == sizes[-1]:  # ~200 rows of 200-1800 bytes: sizes vary by ~6.5 KB
        assert guessed.guesses.hits >= 0.8 * len(sizes)
    # Headers read from guesses are GETs the walk did not make in turn; a miss costs a
    # GET more, never a wrong header.
    assert len(guessed._file.reads) <= 2 * len(alone._file.reads)


@pytest.mark.parametrize("guess", [False, True], ids=["walk", "walk + guesses"])
def test_gets_at_headers_of_long_messages_read_no_body(
    guess: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    import headrace.formats._arrow_remote as remote

    # Record batches of ~200 KB: once the first is seen, a GET at a header (the walk's
    # or a guess's) is _HEAD_STEP, not 64 KiB of body (2.5 MiB for 40 ~200-byte headers).
    data = _big([200_000] * 40, vary=False)
    walk, index = _index_of(data, guess, monkeypatch)
    _same(index, _walk(data))
    sizes = walk._file.sizes
    assert len(sizes) >= 40 // (2 if guess else 1)
    assert sum(n > remote._HEAD_STEP for n in sizes) == 1  # the schema's: sizes unknown
    assert sum(sizes) <= remote._STEP + len(sizes) * remote._HEAD_STEP
    # Batches shorter than a GET keep 64 KiB GETs, each holding ~30 headers.
    small = _big([2_000] * 60, vary=False)
    walk, index = _index_of(small, guess, monkeypatch)
    _same(index, _walk(small))
    assert len(walk._file.sizes) <= -(-len(small) // remote._STEP) + 1


def test_guesses_in_flight_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    import headrace.formats._arrow_remote as remote

    monkeypatch.setattr(remote, "GUESS_AHEAD", 3)
    data = _big([200_000] * 30, vary=False)
    walk, index = _index_of(data, True, monkeypatch)
    assert walk.guesses is not None and walk.guesses.most == 3
    assert walk.guesses.hits == 30 - remote.GUESS_AFTER
    _same(index, _index_of(data, False, monkeypatch)[1])


def test_a_failed_guess_is_fetched_again_and_a_failed_read_is_raised(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from headrace.errors import StorageError

    data = _big([200_000] * 20)
    want = _index_of(data, False, monkeypatch)[1]
    first = _index_of(data, True, monkeypatch)[0]._file.reads
    heads = {at for at, _ in want.spans} | {sum(want.spans[-1])}  # and the end marker
    guessed = frozenset(r for r in first if r not in heads and r)
    assert guessed  # guesses start GETs where no header starts
    # Every guessed GET refused: the walk reads each header itself.
    walk, index = _index_of(data, True, monkeypatch, _Counted(data, guessed))
    _same(index, want)
    assert walk.guesses is not None and walk.guesses.hits == 0
    # The walk's own GET refused (the batch after the first GUESS_AFTER, not guessed):
    # its error, not a guess's silence.
    import headrace.formats._arrow_remote as remote

    at = want.spans[remote.GUESS_AFTER][0]
    with pytest.raises(StorageError, match=rf"bytes at {at}: refused"):
        _index_of(data, True, monkeypatch, _Counted(data, frozenset([at])))


@pytest.mark.parametrize("seed", range(3))
def test_damaged_streams_are_the_same_error_with_guesses(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = _big([150_000, 90_000, 200_000, 120_000] * 4, seed)
    heads = [at for at, _ in _index_of(good, False, monkeypatch)[1].spans]
    rng = random.Random(seed)
    for _ in range(40):
        data = bytearray(good)
        how = rng.randrange(3)
        if how == 0:  # cut
            data = data[: rng.randrange(len(data))]
        elif how == 1:  # a header garbled
            at = rng.choice(heads) + rng.randrange(8, 200)
            data[at : at + 8] = bytes(rng.randrange(256) for _ in range(8))
        else:  # a message's length garbled
            at = rng.choice(heads) + 4
            data[at : at + 4] = rng.randrange(1 << 31).to_bytes(4, "little")
        results = []
        for guess in (False, True):
            try:
                results.append(("index", _index_of(bytes(data), guess, monkeypatch)[1].spans))
            except FormatError as exc:
                results.append(("error", str(exc)))
        assert results[0] == results[1]
