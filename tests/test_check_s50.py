"""headrace check, session 50: a token problem placed in file order, the shapes of a
failed batch's good samples counted, the --dtype hint only where --dtype is the fix,
and positions='documents' refused naming 'bos' too."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from headrace.cli import main
from headrace.errors import ConfigError
from headrace.formats import TokenSource, write_megatron_index
from headrace.pipeline import check

L = 16


def _tokens(path: Path, bad_at: int, n: int = 157) -> None:
    """``n`` samples of ``L`` tokens (ids < 100) with id 60000 at token ``bad_at``."""
    tokens = np.arange(n * L + 1, dtype=np.uint16) % 100
    tokens[bad_at] = 60000
    tokens.tofile(path)


def test_a_bad_token_is_reported_as_its_file_order_sample(tmp_path: Path) -> None:
    # Sample 24 of the file held the bad id; check said "sample 133", its own shuffled
    # order (fails before: 133).
    path = tmp_path / "t.bin"
    _tokens(path, 24 * L + 3)
    report = check(TokenSource(str(path), dtype="uint16", context=L, vocab_size=100), batch_size=8)
    [p] = report.problems
    assert p.sample == 24, p
    assert f"{path}: token offset {24 * L + 3}" in p.message
    # The number reads that sample back from an unshuffled source.
    plain = TokenSource(str(path), dtype="uint16", context=L, shuffle=False)
    assert int(plain.read(0, np.array([p.sample]))["x"].max()) == 60000


def test_file_order_counts_through_several_files(tmp_path: Path) -> None:
    # Two files: the second's sample 5 is the source's sample 157 + 5 in file order.
    a, b = tmp_path / "a.bin", tmp_path / "b.bin"
    _tokens(a, 0, n=157)
    a_tokens = np.fromfile(a, dtype=np.uint16)
    a_tokens[0] = 1
    a_tokens.tofile(a)
    _tokens(b, 5 * L + 7, n=40)
    source = TokenSource([str(a), str(b)], dtype="uint16", context=L, vocab_size=100)
    [p] = check(source, batch_size=8, seed=3).problems
    assert p.sample == 157 + 5, p
    assert f"{b}: token offset {5 * L + 7}" in p.message


def test_json_shapes_count_the_good_samples_of_a_failed_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 157 samples, one bad: the other 7 of its batch of 8 were read (as the halves
    # check reads again); shapes counted 149 (fails before).
    path = tmp_path / "t.bin"
    _tokens(path, 24 * L + 3)
    out = tmp_path / "r.json"
    args = ["check", str(path), "--format", "tokens", "--dtype", "uint16", "--context", str(L)]
    assert main([*args, "--vocab-size", "100", "--batch-size", "8", "--json", str(out)]) == 1
    data = json.loads(out.read_text())
    assert data["shapes"]["x"]["(16,) uint16"][0] == 156, data["shapes"]
    assert data["problems"][0]["sample"] == 24


def test_a_megatron_dtype_refusal_gets_no_dtype_flag_hint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The .idx names its dtype; the message's "dtype=numpy.int32" is the writer's
    # argument, and --dtype cannot fix it (fails before: the hint was added).
    lengths = [100, 200]
    np.arange(300, dtype=np.int32).tofile(tmp_path / "m.bin")
    write_megatron_index(tmp_path / "m.idx", np.int32, lengths)
    raw = bytearray((tmp_path / "m.idx").read_bytes())
    raw[17] = 6  # the dtype code: float32
    (tmp_path / "m.idx").write_bytes(bytes(raw))
    code = main(["check", str(tmp_path / "m.bin"), "--format", "tokens", "--context", "16"])
    err = capsys.readouterr().err
    assert code == 2
    assert "is not a token type" in err, err
    assert "--dtype" not in err, err


def test_documents_without_an_idx_names_bos_too(tmp_path: Path) -> None:
    path = tmp_path / "t.bin"
    _tokens(path, 0)
    with pytest.raises(ConfigError) as caught:
        TokenSource(str(path), dtype="uint16", context=L, positions="documents")
    assert "positions='eos'" in str(caught.value)
    assert "positions='bos', bos_id=" in str(caught.value)
