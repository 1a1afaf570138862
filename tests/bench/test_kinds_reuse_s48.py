"""A dataset generated before is reused only when it is the one the workload asks for."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from headrace.bench._kind import make_kind
from headrace.bench._workload import builtin_workloads
from headrace.formats import read_megatron_index

MEGATRON = {"dtype": "uint16", "token_file_gib": 0.0001, "context": 32}


def _megatron_lengths(root: Path, document_tokens: int) -> tuple[int, np.ndarray]:
    wl = builtin_workloads()["megatron"].replace(
        dataset={**MEGATRON, "document_tokens": document_tokens}
    )
    kind = make_kind(wl, str(root))
    to_write = kind.bytes_to_write()
    kind.write()
    bin_path, idx = kind.files()
    return to_write, read_megatron_index(idx, os.path.getsize(bin_path)).sequence_lengths


def test_megatron_index_is_rewritten_when_document_tokens_changes(tmp_path: Path) -> None:
    # The .bin and .idx are named by size, dtype and seed only: a second run with another
    # document_tokens found both there and kept the first run's documents (and said it
    # had nothing to write), measuring a dataset the workload did not describe.
    _, first = _megatron_lengths(tmp_path, 256)
    assert set(first[:-1].tolist()) == {256}
    to_write, second = _megatron_lengths(tmp_path, 100)
    assert to_write > 0  # the index, not the tokens
    assert set(second[:-1].tolist()) == {100} and second.sum() == first.sum()
    # the same settings again: nothing to write, the index kept
    to_write, third = _megatron_lengths(tmp_path, 100)
    assert to_write == 0 and np.array_equal(third, second)


def test_token_sidecar_follows_a_token_file_rewritten_under_the_same_name(
    tmp_path: Path,
) -> None:
    # The file is named by its size to 6 digits: 0.001000001 and 0.001000005 GiB of uint16
    # are both tokens-0.001gib-uint16-s0.bin, 536871 and 536873 tokens. The second run
    # rewrote the tokens (their marker differs) but kept the first run's sidecar, and the
    # run ended in "the sidecar says 536871 uint16 tokens (1073742 bytes), the file has
    # 1073746 bytes".
    wl = builtin_workloads()["tokens"]
    for gib, tokens in ((0.001000001, 536871), (0.001000005, 536873)):
        ds = {"dtype": "uint16", "token_file_gib": gib, "context": 32}
        kind = make_kind(wl.replace(dataset=ds), str(tmp_path))
        assert kind.path.endswith("tokens-0.001gib-uint16-s0.bin")
        kind.write()
        src = kind.source()  # (it refused the file)
        try:
            assert src.samples_per_epoch == (tokens - 1) // 32
        finally:
            src.close()
        assert os.path.getsize(kind.path) == 2 * tokens
