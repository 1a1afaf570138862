"""``FileSource(..., labels="folders")``: each sample's class from its file's folder,
as torchvision's ``ImageFolder`` gives it, on real JPEG and NPY files."""

from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError, DataError, StateError
from headrace.formats import FileSource, FileSourceConfig, IterableFiles, synthetic_arrays
from headrace.formats import write_sample_file as write
from headrace.pipeline import Loader
from headrace.testing import assert_resume_exact, batch_digest

# class folder -> images in it; "cat/kitten/" is nested, as ImageFolder allows
LAYOUT = {"dog": 4, "cat": 3, "cat/kitten": 2, "ant": 3}


def image_folder(root: Path, layout: dict[str, int] = LAYOUT) -> Path:
    n = 0
    for folder, count in layout.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        for i in range(count):
            arrays = synthetic_arrays("jpeg", seed=n, shape=(8, 8, 3))
            write("jpeg", root / folder / f"{i:03d}.jpg", arrays)
            n += 1
    return root


def imagefolder_targets(root: Path) -> dict[str, int]:
    """What torchvision's ``ImageFolder`` gives each file (its ``find_classes`` and
    ``make_dataset``, written out: class = a folder right under the root, numbered in
    sorted order; every file below it, at any depth, is of that class)."""
    classes = sorted(e.name for e in os.scandir(root) if e.is_dir())
    out = {}
    for i, c in enumerate(classes):
        for dirpath, _, names in os.walk(root / c):
            for name in names:
                out[os.path.relpath(os.path.join(dirpath, name), root)] = i
    return out


def labels_of(src: FileSource, batch: dict[str, Any]) -> dict[str, int]:
    files = src.file_item(batch["index"])[0]
    return {src.files.keys[f]: int(v) for f, v in zip(files, batch["label"], strict=True)}


def test_folders_give_imagefolder_classes(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "train")
    src = FileSource(root, format="jpeg", labels="folders")
    assert src.classes == ("ant", "cat", "dog")
    assert "12 jpeg file(s), 12 samples an epoch, shuffle='files', labels of 3 classes" in repr(src)
    want = imagefolder_targets(root)
    assert len(want) == 12
    seen: dict[str, int] = {}
    with Loader(src, batch_size=4, seed=3, steps=6) as loader:  # two epochs
        for batch in loader:
            assert batch["label"].dtype == np.int64 and batch["label"].shape == (4,)
            seen.update(labels_of(src, batch))
    assert seen == want  # cat/kitten/*.jpg are cats, as in ImageFolder
    src.close()


def test_every_sample_of_a_file_gets_its_class(tmp_path: Path) -> None:
    for c, n in (("b", 2), ("a", 3)):
        (tmp_path / c).mkdir()
        for i in range(n):
            data = np.full((4, 2), 10 * n + i, dtype=np.int32)  # 4 samples a file
            write("npy", tmp_path / c / f"{i}.npy", {"data": data})
    src = FileSource(tmp_path, format="npy", samples_per_file=4, labels="folders")
    with Loader(src, batch_size=5, seed=0, steps=4) as loader:
        for batch in loader:
            # a file's value says its folder: 30.. in a (3 files), 20.. in b (2 files)
            want = np.where(batch["data"][:, 0] >= 30, 0, 1)
            np.testing.assert_array_equal(batch["label"], want)
    src.close()


def test_a_list_or_glob_takes_the_folder_each_file_is_in(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "train")
    src = FileSource(str(root / "*" / "*.jpg"), format="jpeg", labels="folders")
    # A glob's matches carry no root: cat/kitten/*.jpg (not matched here) would be kitten.
    assert src.classes == ("ant", "cat", "dog")
    assert len(src.files) == 10
    src.close()
    nested = sorted(str(p) for p in root.rglob("*.jpg"))
    src = FileSource(nested, format="jpeg", labels="folders")
    assert src.classes == ("ant", "cat", "dog", "kitten")
    src.close()
    # One class's files alone: the folder they are in, not a key's first folder.
    # (Numbered 0, where the tree numbers it 2: said since 2026-12-07.)
    with pytest.warns(UserWarning, match=r"'ant', 'cat'.*classes="):
        src = FileSource(sorted((root / "dog").glob("*.jpg")), format="jpeg", labels="folders")
    assert src.classes == ("dog",)
    np.testing.assert_array_equal(src.file_labels, [0, 0, 0, 0])
    src.close()


def test_a_split_numbered_as_training_was(tmp_path: Path) -> None:
    train = image_folder(tmp_path / "train")
    val = image_folder(tmp_path / "val", {"dog": 2, "cat": 2})  # no "ant" images
    with FileSource(train, format="jpeg", labels="folders") as t:
        classes = t.classes
    assert classes is not None
    with FileSource(val, format="jpeg", labels="folders") as alone:
        assert alone.classes == ("cat", "dog")  # cat would be 0: not training's number
    with FileSource(val, format="jpeg", labels="folders", classes=classes) as v:
        assert v.classes == ("ant", "cat", "dog")
        with Loader(v, batch_size=4, seed=0, steps=1) as loader:
            batch = next(iter(loader))
        got = labels_of(v, batch)
    assert got == {k: 1 if k.startswith("cat") else 2 for k in got}
    assert len(got) == 4


@pytest.mark.parametrize(
    ("options", "says"),
    [
        ({"labels": "folder"}, "must be 'folders'"),
        ({"labels": ["cat", "dog"]}, r"a list numbers the classes: labels='folders', classes="),
        (
            {"labels": {"000.jpg": 1}},
            r"maps each file's name to its class's name.*\('000.jpg', 1\)",
        ),
        ({"labels": {"a": "b", 7: "c"}}, r"\(7, 'c'\)"),
        ({"labels": {}}, "empty mapping"),
        ({"labels": "folders", "classes": {"cat", "dog"}}, "not a set"),
        ({"labels": "folders", "classes": []}, "empty list"),
        ({"labels": "folders", "classes": ["cat", "dog", "cat"]}, "names 'cat' twice"),
        ({"labels": "folders", "classes": [1, 2]}, "list of class names"),
        ({"labels": "folders", "classes": "cat"}, "list of class names"),
        ({"classes": ["cat"]}, "give labels='folders'"),
    ],
)
def test_bad_labels_are_refused(tmp_path: Path, options: dict[str, Any], says: str) -> None:
    root = image_folder(tmp_path / "train", {"cat": 1})
    with pytest.raises(ConfigError, match=says):
        FileSource(root, format="jpeg", **options)


def test_folders_not_among_the_classes_are_named(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "train")
    with pytest.raises(DataError) as err:
        FileSource(root, format="jpeg", labels="folders", classes=["cat", "dog"])
    said = str(err.value)
    assert "1 of its 3 class folders" in said and "['ant']" in said
    assert "ant/000.jpg" in said and str(root) in said


def test_files_in_no_class_folder_are_refused(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "train", {"cat": 2})
    write("jpeg", root / "stray.jpg", synthetic_arrays("jpeg", seed=9, shape=(8, 8, 3)))
    with pytest.raises(DataError, match=r"1 of 3 files are directly in .*'stray.jpg'"):
        FileSource(root, format="jpeg", labels="folders")


def test_labels_are_part_of_the_state(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "train")

    def loader(**kw: Any) -> Loader:
        return Loader(FileSource(root, format="jpeg", **kw), batch_size=4, seed=1)

    with loader(labels="folders") as a:
        next(iter(a))
        state = a.state_dict()
    with loader() as plain, pytest.raises(StateError, match="classes"):
        plain.load_state_dict(state)
    with (
        loader(labels="folders", classes=["ant", "dog", "cat"]) as other,
        pytest.raises(StateError),
    ):
        other.load_state_dict(state)  # other numbers: other batches
    with loader(labels="folders", classes=["ant", "cat", "dog"]) as same:  # sorted, given
        same.load_state_dict(state)
    assert_resume_exact(lambda: loader(labels="folders"), steps=9, resume_at=[1, 3, 4])


def test_a_replaced_sample_has_its_replacements_class(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "train", {"a": 1, "b": 5})
    (root / "a" / "000.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    src = FileSource(root, format="jpeg", labels="folders", on_corrupt="replace", max_corrupt=1)
    with Loader(src, batch_size=6, seed=0, steps=1) as loader:
        batch = next(iter(loader))
    assert src.replaced_samples == 1
    np.testing.assert_array_equal(batch["label"], np.ones(6))  # every image is b's now
    src.close()


def test_iterable_style_and_a_pickled_copy_label_alike(tmp_path: Path) -> None:
    root = image_folder(tmp_path / "train")
    src = FileSource(root, format="jpeg", labels="folders")
    want = imagefolder_targets(root)
    with IterableFiles(src, batch_size=3) as it:
        for batch in it.epoch(seed=0, epoch=0):
            assert labels_of(src, batch) == {k: want[k] for k in labels_of(src, batch)}
    copy_labels_alike(src, pickle.dumps(src))  # a worker's copy: the parent's labels


def copy_labels_alike(src: FileSource, sent: bytes) -> None:
    """The copy ``sent`` (pickled ``src``) has ``src``'s classes, labels, fingerprint and
    batches; both closed."""
    copy = pickle.loads(sent)
    assert copy.classes == src.classes
    np.testing.assert_array_equal(copy.file_labels, src.file_labels)
    assert copy.fingerprint() == src.fingerprint()
    with (
        Loader(src, batch_size=4, seed=2, steps=5) as a,
        Loader(copy, batch_size=4, seed=2, steps=5) as b,
    ):
        assert batch_digest(a) == batch_digest(b)
    src.close()
    copy.close()


def test_a_files_own_label_is_not_overwritten(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    arrays = {"x": np.zeros((2, 3), np.float32), "label": np.array([5, 6])}
    write("npz", tmp_path / "a" / "0.npz", arrays)
    src = FileSource(tmp_path, format="npz", samples_per_file=2, labels="folders")
    with (
        Loader(src, batch_size=2, seed=0, steps=1) as loader,
        pytest.raises(DataError, match="hold a 'label' of their own"),
    ):
        next(iter(loader))
    src.close()


def test_torch_workers_give_the_same_labels(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from headrace.torch import HeadraceDataLoader, TorchDataset

    root = image_folder(tmp_path / "train")

    def digest(workers: int) -> tuple[str, list[int]]:
        ds = TorchDataset(FileSource(root, format="jpeg", labels="folders"), batch_size=4, seed=5)
        labels: list[int] = []
        batches = []
        with HeadraceDataLoader(ds, num_workers=workers) as dl:
            for _, batch in zip(range(6), dl, strict=False):
                labels += batch["label"].tolist()
                batches.append({k: v.numpy() for k, v in batch.items()})
        return batch_digest(batches), labels

    d0, labels = digest(0)
    assert digest(2) == (d0, labels)
    assert sorted(set(labels)) == [0, 1, 2]
    # A mapping's labels, in workers sent the numbers only (spawned workers unpickle them).
    wnid = flat_split(tmp_path / "val")
    ds = TorchDataset(FileSource(tmp_path / "val", format="jpeg", labels=wnid), batch_size=3)
    seen = []
    with HeadraceDataLoader(ds, num_workers=2, multiprocessing_context="spawn") as dl:
        for _, batch in zip(range(4), dl, strict=False):
            seen += batch["label"].tolist()
    want = ds.source.file_labels[ds.source.file_item(np.arange(6))[0]]
    assert sorted(seen) == sorted(want.tolist() * 2)  # two epochs of the six files


def flat_split(root: Path, n: int = 6) -> dict[str, str]:
    """A flat validation folder (ImageNet's as unpacked) and its classes by file name."""
    root.mkdir(parents=True)
    for i in range(n):
        write("jpeg", root / f"val_{i:02d}.jpg", synthetic_arrays("jpeg", seed=i, shape=(8, 8, 3)))
    return {f"val_{i:02d}.jpg": ("dog", "ant", "cat")[i % 3] for i in range(n)}


def test_a_mapping_names_each_files_class(tmp_path: Path) -> None:
    wnid = flat_split(tmp_path / "val")
    extra = {**wnid, "val_99.jpg": "eel"}  # a file not here (a CSV for the whole split)
    src = FileSource(tmp_path / "val", format="jpeg", labels=extra, shuffle="none")
    assert src.classes == ("ant", "cat", "dog")  # the files' classes
    seen: dict[str, int] = {}
    with Loader(src, batch_size=4, seed=0, steps=3) as loader:  # two epochs
        for batch in loader:
            seen.update(labels_of(src, batch))
    assert seen == {k: src.classes.index(c) for k, c in wnid.items()}
    src.close()
    # Numbered as training was: classes= orders them.
    order = ["cat", "dog", "ant"]
    with FileSource(tmp_path / "val", format="jpeg", labels=wnid, classes=order) as v:
        assert v.classes == tuple(order)
        assert [order[i] for i in v.file_labels] == [wnid[k] for k in v.files.keys]
    # A list of files: its names as listed.
    listed = sorted((tmp_path / "val").glob("*.jpg"))
    by_path = {p: wnid[p.name] for p in listed}  # Paths, as the list has them
    with FileSource(listed, format="jpeg", labels=by_path) as src:
        np.testing.assert_array_equal(src.file_labels, [2, 0, 1, 2, 0, 1])


def test_a_config_with_a_mapping_is_hashable_and_compares_by_it() -> None:
    # Configs hash (lists are kept as tuples for it); a mapping is a dict.
    a = FileSourceConfig(format="jpeg", labels={"x.jpg": "cat"})
    b = FileSourceConfig(format="jpeg", labels={"x.jpg": "dog"})
    assert hash(a) == hash(FileSourceConfig(format="jpeg", labels={"x.jpg": "cat"}))
    assert a != b and len({a, b}) == 2


def test_a_mapping_missing_a_file_or_a_class_is_refused(tmp_path: Path) -> None:
    wnid = flat_split(tmp_path / "val")
    short = {k: c for k, c in wnid.items() if k != "val_04.jpg"}
    with pytest.raises(DataError) as err:
        FileSource(tmp_path / "val", format="jpeg", labels=short)
    said = str(err.value)
    assert "classes of 5 of its 6 files, not 'val_04.jpg' (1 in all)" in said
    assert "names under the folder given (e.g. 'val_00.jpg'" in said and str(tmp_path) in said
    # Keyed by full paths where the keys are names under the folder: told what keys are.
    full = {str(tmp_path / "val" / k): c for k, c in wnid.items()}
    with pytest.raises(DataError, match=f"one of labels' keys is '{tmp_path}/val/val_00.jpg'"):
        FileSource(tmp_path / "val", format="jpeg", labels=full)
    with pytest.raises(DataError, match=r"1 of its 3 classes labels= names .*\['ant'\]"):
        FileSource(tmp_path / "val", format="jpeg", labels=wnid, classes=["cat", "dog"])


def test_a_copy_takes_the_mappings_labels_without_it(tmp_path: Path) -> None:
    wnid = flat_split(tmp_path / "val")
    whole = {**wnid, **{f"other_{i:05d}.jpg": "eel" for i in range(20_000)}}
    src = FileSource(tmp_path / "val", format="jpeg", labels=whole)
    sent = pickle.dumps(src)
    assert len(sent) < len(pickle.dumps(whole)) / 10  # the labels, not the mapping
    assert src.classes == ("ant", "cat", "dog")
    copy_labels_alike(src, sent)


def test_a_mapping_with_other_classes_is_another_state(tmp_path: Path) -> None:
    wnid = flat_split(tmp_path / "val")
    swapped = {**wnid, "val_00.jpg": "ant", "val_01.jpg": "dog"}  # same classes, others' files

    def loader(labels: dict[str, str]) -> Loader:
        return Loader(FileSource(tmp_path / "val", format="jpeg", labels=labels), batch_size=4)

    with loader(wnid) as a:
        next(iter(a))
        state = a.state_dict()
    with loader(swapped) as b, pytest.raises(StateError, match="file_labels"):
        b.load_state_dict(state)
    with loader(dict(reversed(wnid.items()))) as c:  # the same mapping, in another order
        c.load_state_dict(state)
    assert_resume_exact(lambda: loader(wnid), steps=6, resume_at=[1, 4])
