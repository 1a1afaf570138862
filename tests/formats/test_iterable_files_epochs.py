"""The iterable comparison mode, as a persistent worker runs it: one IterableFiles kept
across epochs reads each epoch in that epoch's order (the defect of a persistent
DataLoader worker that keeps epoch 1's shuffle cannot happen here)."""

from __future__ import annotations

from pathlib import Path

from headrace.formats import FileSource, IterableFiles, synthetic_arrays, write_sample_file


def test_one_iterator_kept_across_epochs_reshuffles_each_epoch(tmp_path: Path) -> None:
    for i in range(12):
        write_sample_file(
            "npy", tmp_path / f"f{i:02d}.npy", synthetic_arrays("npy", seed=i, shape=(4,))
        )
    src = FileSource(tmp_path, format="npy")
    try:
        kept = IterableFiles(src, batch_size=2, worker=1, num_workers=2, in_flight=3)

        def order(it: IterableFiles, epoch: int) -> list[int]:
            return [i for b in it.epoch(seed=5, epoch=epoch) for i in b["index"].tolist()]

        e0, e1, e0_again, e2 = (order(kept, e) for e in (0, 1, 0, 2))
        assert e0 != e1 and e1 != e2 and e0_again == e0
        # Each is what a fresh worker reads in that epoch, and that worker's shard.
        for epoch, got in ((0, e0), (1, e1), (2, e2)):
            fresh = IterableFiles(src, batch_size=2, worker=1, num_workers=2, in_flight=3)
            assert order(fresh, epoch) == got
            assert got == kept.shard(5, epoch).tolist()  # one sample a file: its index
    finally:
        src.close()
