"""check(): one pass over a dataset that lists every sample whose read fails."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from headrace.errors import ConfigError
from headrace.formats import FileSource, TokenSource, synthetic_arrays, write_sample_file
from headrace.pipeline import Mixture, check


def jpegs(root: Path, n: int, bad: tuple[int, ...] = ()) -> Path:
    """``n`` JPEG files ``f000.jpg``..., those numbered in ``bad`` cut to garbage."""
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        path = root / f"f{i:03d}.jpg"
        write_sample_file("jpeg", path, synthetic_arrays("jpeg", seed=i, shape=(8, 6, 3)))
        if i in bad:
            path.write_bytes(path.read_bytes()[:20] + b"\x00garbage" * 8)
    return root


@pytest.mark.parametrize("batch_size", [1, 8, 64])
def test_every_corrupt_file_is_listed_once_and_the_rest_read(
    tmp_path: Path, batch_size: int
) -> None:
    bad = (3, 17, 18, 40)
    src = FileSource(jpegs(tmp_path / "j", 45, bad), format="jpeg", shuffle="none")
    report = check(src, batch_size=batch_size)
    # Unshuffled, sample i is file i: each bad file once, in order, named, and not ok.
    assert [p.sample for p in report.problems] == list(bad)
    for p, i in zip(report.problems, bad, strict=True):
        assert p.source == "FileSource" and p.error == "FormatError"
        assert f"f{i:03d}.jpg" in p.message
    assert (report.samples, report.complete, report.ok) == (45, True, False)
    assert "4 failed" in str(report) and "f017.jpg" in str(report)
    src.close()


def test_shuffled_samples_name_the_same_files(tmp_path: Path) -> None:
    # Any seed reads every sample once: the files named are the same set.
    src = FileSource(jpegs(tmp_path / "j", 30, (5, 22)), format="jpeg", shuffle="files")
    named = set()
    for seed in (0, 7):
        report = check(src, batch_size=8, seed=seed)
        named.add(frozenset(p.message.split(":")[0].rsplit("/", 1)[-1] for p in report.problems))
    assert named == {frozenset({"f005.jpg", "f022.jpg"})}
    src.close()


def test_a_clean_dataset_is_ok(tmp_path: Path) -> None:
    src = FileSource(jpegs(tmp_path / "j", 20), format="jpeg")
    seen: list[tuple[int, int]] = []
    report = check(src, batch_size=8, progress=lambda done, total: seen.append((done, total)))
    assert report.ok and report.samples == 20 and not report.problems
    assert seen[-1] == (20, 20) and "no problems" in str(report)
    src.close()


def test_most_stops_the_check(tmp_path: Path) -> None:
    src = FileSource(
        jpegs(tmp_path / "j", 40, tuple(range(0, 40, 3))), format="jpeg", shuffle="none"
    )
    report = check(src, batch_size=8, most=2)
    assert [p.sample for p in report.problems] == [0, 3]
    assert not report.complete and not report.ok and "stopped at 2" in str(report)
    assert report.samples == 8  # up to the step of the second problem (samples 0..7)
    src.close()


@pytest.mark.parametrize("shards", [2, 3, 7])
def test_shards_together_are_the_whole_check(tmp_path: Path, shards: int) -> None:
    # k machines check steps i, i + k, ...: their problems and samples add up to one check.
    bad = (3, 17, 18, 40, 44)
    src = FileSource(jpegs(tmp_path / "j", 45, bad), format="jpeg", shuffle="none")
    whole = check(src, batch_size=4)
    parts = [check(src, batch_size=4, shard=(i, shards)) for i in range(shards)]
    assert sum(p.samples for p in parts) == whole.samples == 45
    got = sorted(q.sample for p in parts for q in p.problems)
    assert got == [q.sample for q in whole.problems] == list(bad)
    # Shard i holds the bad samples of its own steps only.
    for i, p in enumerate(parts):
        assert all((q.sample // 4) % shards == i for q in p.problems)
    with pytest.raises(ConfigError, match=r"shard must be \(i, k\) with 0 <= i < k \(got \(2, 2\)"):
        check(src, shard=(2, 2))
    src.close()


def test_shard_sample_counts_match_a_count_step_by_step() -> None:
    from headrace.pipeline._check import _shard_samples

    for n in (1, 5, 63, 64, 65, 1000):
        for b in (1, 7, 64):
            steps = -(-n // b)
            for k in (1, 2, 5, 9):
                for i in range(k):
                    want = sum(min(b, n - t * b) for t in range(i, steps, k))
                    assert _shard_samples(n, b, i, k) == want, (n, b, i, k)


def test_token_ids_past_the_vocabulary_are_listed_by_window(tmp_path: Path) -> None:
    # Window s holds tokens [16s, 16s + 16]: id 1000 at token 200 is in window 12 only,
    # id 1001 at token 1001 in window 62 only.
    tokens = np.full(2000, 7, dtype=np.uint16)
    tokens[200] = 1000
    tokens[1001] = 1001
    path = tmp_path / "t.bin"
    tokens.tofile(path)
    src = TokenSource(path, dtype="uint16", context=16, shuffle=False, vocab_size=1000)
    report = check(src, batch_size=16)
    assert [p.sample for p in report.problems] == [12, 62]
    assert all(p.error == "FormatError" and "t.bin" in p.message for p in report.problems)
    src.close()


def test_a_mixture_is_checked_source_by_source(tmp_path: Path) -> None:
    good = FileSource(jpegs(tmp_path / "a", 10), format="jpeg")
    bad = FileSource(jpegs(tmp_path / "b", 12, (4,)), format="jpeg", shuffle="none")
    mix = Mixture({"clean": good, "scraped": bad}, [1, 1], batch_size=4)
    report = check(mix, batch_size=4)
    assert report.samples == 22
    assert [(p.sample, "'scraped'" in p.source) for p in report.problems] == [(4, True)]
    good.close()
    bad.close()


def test_a_file_removed_after_listing_is_a_storage_problem(tmp_path: Path) -> None:
    root = jpegs(tmp_path / "j", 10)
    src = FileSource(root, format="jpeg", shuffle="none")
    (root / "f006.jpg").unlink()
    report = check(src, batch_size=4)
    assert [(p.sample, p.error) for p in report.problems] == [(6, "ObjectNotFoundError")]
    src.close()


def test_sources_that_replace_bad_samples_are_refused(tmp_path: Path) -> None:
    src = FileSource(jpegs(tmp_path / "j", 4), format="jpeg", on_corrupt="replace")
    with pytest.raises(ConfigError, match=r"^check: FileSource replaces .*on_corrupt='raise'"):
        check(src)
    with pytest.raises(ConfigError, match=r"batch_size >= 1 and most >= 1"):
        check(FileSource(tmp_path / "j", format="jpeg"), most=0)
    src.close()


def test_an_error_that_is_not_about_the_data_is_raised_not_listed(tmp_path: Path) -> None:
    # A ConfigError (a bug, a wrong argument) would fail every sample alike: the check
    # stops and raises it, rather than listing most=100 copies of it.
    class Misconfigured:
        samples_per_epoch = 10

        def fingerprint(self) -> dict[str, object]:
            return {"kind": "test"}

        def read(self, seed: int, samples: np.ndarray) -> dict[str, np.ndarray]:
            raise ConfigError("decode_threads must be >= 0 (got -1)")

    with pytest.raises(ConfigError, match="decode_threads must be >= 0"):
        check(Misconfigured(), batch_size=4)


@pytest.mark.parametrize("batch_size", [1, 3, 64])
def test_an_odd_shape_is_named_with_its_file_and_the_rest_counted(
    tmp_path: Path, batch_size: int
) -> None:
    h5py = pytest.importorskip("h5py")
    root = tmp_path / "h5"
    root.mkdir()
    for i in range(7):  # one scan of another size among seven, as a scanner's odd run
        with h5py.File(root / f"s{i}.h5", "w") as f:
            f.create_dataset("image", data=np.zeros((4, 5 + (i == 4)), np.float32))
            f.create_dataset("label", data=np.int64(i))
    src = FileSource(root, format="hdf5", datasets=("image", "label"), shuffle="none")
    report = check(src, batch_size=batch_size)
    # Not a failure (ragged batches are data), but said, with counts and the odd file.
    assert report.ok and report.samples == 7
    assert report.shapes["image"] == {
        "(4, 5) float32": [6, "sample 0, s0.h5"],
        "(4, 6) float32": [1, "sample 4, s4.h5"],
    }
    assert report.shapes["label"] == {"() int64": [7, "sample 0, s0.h5"]}
    assert report.varied == [
        "'image' has 2 shapes: (4, 5) float32 in 6 (first: sample 0, s0.h5), (4, 6) float32 "
        "in 1 (first: sample 4, s4.h5); a batch holding two is ragged (an object array and "
        "its _shape)"
    ]
    assert "no problems\n  note: 'image' has 2 shapes" in str(report)
    src.close()


def test_one_shape_throughout_adds_no_note(tmp_path: Path) -> None:
    src = FileSource(jpegs(tmp_path / "j", 10), format="jpeg")
    report = check(src, batch_size=4)
    assert [(k, n) for k, (n, _) in report.shapes["image"].items()] == [("(8, 6, 3) uint8", 10)]
    assert report.varied == [] and str(report).endswith("no problems")
    src.close()
