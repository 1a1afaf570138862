"""A fine-tuning journey over Hugging Face-style tables (session 50): datasets written by
``datasets`` itself (``save_to_disk`` and ``to_parquet``), read through ``TableSource``,
``Mixture``, ``Filtered`` and ``Mapped`` as a user does, each batch compared with what
``datasets`` gives for its rows.

What it found: a ``ClassLabel`` column's numbers mean what the file's class names say,
and two sources (or two files of one table) that name their classes in another order
were mixed into one batch, label 0 a "negative" review from one and a "positive" one
from the other, with no word. Both are refused now, naming the column, both sides'
names and the fix (``datasets``' ``align_labels_with_mapping``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.errors import ConfigError, FormatError
from headrace.formats import TableSource
from headrace.pipeline import Filtered, Loader, Mapped, Mixture

datasets = pytest.importorskip("datasets", reason="datasets is a test extra")

SENTIMENT = ["negative", "positive"]


def reviews(names: list[str], texts: list[str], labels: list[int]) -> Any:
    """A text-classification Dataset whose ``label`` is a ClassLabel of ``names``."""
    features = datasets.Features(
        {"text": datasets.Value("string"), "label": datasets.ClassLabel(names=names)}
    )
    return datasets.Dataset.from_dict({"text": texts, "label": labels}, features=features)


def two_label_orders(tmp_path: Path, how: str) -> tuple[Path, Path]:
    """Two sentiment datasets, the second naming its classes in the other order (as
    Hub datasets do: sst2 says negative, positive; others positive, negative)."""
    a = reviews(SENTIMENT, ["bad", "good", "meh", "great"], [0, 1, 0, 1])
    b = reviews(SENTIMENT[::-1], ["superb", "awful", "fine", "dreadful"], [0, 1, 0, 1])
    paths = []
    for name, ds in (("a", a), ("b", b)):
        path = tmp_path / (name if how == "save_to_disk" else f"{name}.parquet")
        getattr(ds, how)(str(path))
        paths.append(path)
    return paths[0], paths[1]


@pytest.mark.parametrize("how", ["save_to_disk", "to_parquet"])
def test_mixture_refuses_class_labels_named_in_another_order(tmp_path: Path, how: str) -> None:
    a, b = two_label_orders(tmp_path, how)
    sa, sb = TableSource(a, columns=["label"]), TableSource(b, columns=["label"])
    with pytest.raises(ConfigError) as info:
        Mixture({"sst": sa, "imdb": sb}, [0.5, 0.5], batch_size=4)
    msg = str(info.value)
    for part in ("'label'", "'sst'", "'imdb'", "negative", "positive", "align_labels_with_mapping"):
        assert part in msg, (part, msg)
    # A filter keeps the labels' meaning: it is refused through one too.
    with pytest.raises(ConfigError, match="align_labels_with_mapping"):
        Mixture(
            {"sst": Filtered(sa, lambda r, s: r["label"] >= 0), "imdb": sb}, [1, 1], batch_size=4
        )


def test_mixture_of_aligned_class_labels_reads_their_meaning(tmp_path: Path) -> None:
    """The fix the message names: aligned with datasets' own call, the two mix, and
    every row's label names the class datasets gives it."""
    a, b = two_label_orders(tmp_path, "save_to_disk")
    aligned = datasets.load_from_disk(str(b)).align_labels_with_mapping(
        {n: i for i, n in enumerate(SENTIMENT)}, "label"
    )
    aligned.save_to_disk(str(tmp_path / "b_aligned"))
    sa = TableSource(a, columns=["text", "label"], width=16, shuffle=False)
    sb = TableSource(tmp_path / "b_aligned", columns=["text", "label"], width=16, shuffle=False)
    mix = Mixture({"sst": sa, "imdb": sb}, [0.5, 0.5], batch_size=4)
    truth = {0: datasets.load_from_disk(str(a)), 1: datasets.load_from_disk(str(b))}
    seen = 0
    with Loader(mix, batch_size=4, seed=0, epochs=1) as ld:
        for batch in ld:
            for j in np.flatnonzero(batch["valid"]):
                ds = truth[int(batch["source"][j])]
                row = ds[int(batch["sample"][j])]
                text = bytes(batch["text"][j][batch["text_mask"][j]]).decode()
                assert text == row["text"]
                assert SENTIMENT[batch["label"][j]] == ds.features["label"].int2str(row["label"])
                seen += 1
    assert seen == 8
    # A Mapped fn may change the labels: it says what they mean, and is not compared.
    Mixture({"sst": sa, "imdb": Mapped(TableSource(b, columns=["label"]), lambda r, s: r)},
            [1, 1], batch_size=4)  # fmt: skip


@pytest.mark.parametrize("how", ["save_to_disk", "to_parquet"])
def test_table_refuses_files_naming_classes_in_another_order(tmp_path: Path, how: str) -> None:
    a, b = two_label_orders(tmp_path, how)
    files = sorted(tmp_path.glob("*/data-*.arrow")) if how == "save_to_disk" else [a, b]
    assert len(files) == 2
    with pytest.raises(FormatError) as info:
        TableSource([str(f) for f in files], columns=["text", "label"], width=16)
    msg = str(info.value)
    for part in ("'label'", files[0].name, files[1].name, "align_labels_with_mapping"):
        assert part in msg, (part, msg)
    # Columns not read are not compared: the text alone reads.
    assert len(TableSource([str(f) for f in files], columns=["text"], width=16)) == 8


TEXTS = ["héllo wörld", "日本語のテキスト", "", "plain ascii", "✓✓✓", "ab日"]


@pytest.mark.parametrize("side", ["right", "left"])
@pytest.mark.parametrize("how", ["save_to_disk", "to_parquet"])
def test_truncated_text_ends_on_a_character(tmp_path: Path, how: str, side: str) -> None:
    """``truncate=True`` cut a text column at ``width`` bytes, inside a character's UTF-8
    bytes ("日" is three): the row's bytes no longer decoded (a Mapped fn tokenizing the
    text raised UnicodeDecodeError on some rows only). Now it keeps the whole characters
    that fit, as ``text.encode()[:width]`` cut back to a character boundary."""
    ds = reviews(SENTIMENT, TEXTS, [i % 2 for i in range(len(TEXTS))])
    path = tmp_path / ("ds" if how == "save_to_disk" else "t.parquet")
    getattr(ds, how)(str(path))
    width = 7
    src = TableSource(path, columns=["text"], width=width, truncate=True, shuffle=False,
                      pad_side=side, pad_values={"text": 32})  # fmt: skip
    with Loader(src, batch_size=len(TEXTS), seed=0, epochs=1) as ld:
        batch = next(iter(ld))
    for j, text in enumerate(ds["text"]):
        row, mask = batch["text"][j], batch["text_mask"][j]
        kept = text.encode()[:width].decode("utf-8", errors="ignore")  # whole characters
        assert bytes(row[mask]).decode() == kept, (j, text, bytes(row[mask]))
        n = len(kept.encode())
        real = slice(0, n) if side == "right" else slice(width - n, width)
        assert mask[real].all() and mask.sum() == n, (j, mask)
        assert (row[~mask] == 32).all(), (j, row)


def test_too_long_text_counts_its_bytes(tmp_path: Path) -> None:
    """A text over the width is measured in UTF-8 bytes, which is what the width counts:
    the message said "items", and a user checking len(text) found it under the width."""
    ds = reviews(SENTIMENT, ["日本語のテキスト", "ok"], [0, 1])
    ds.save_to_disk(str(tmp_path / "ds"))
    src = TableSource(tmp_path / "ds", columns=["text"], width=12, shuffle=False)
    with pytest.raises(ConfigError) as info, Loader(src, batch_size=2, seed=0, epochs=1) as ld:
        next(iter(ld))
    msg = str(info.value)
    assert "24 bytes" in msg and "8 characters" in msg and "UTF-8" in msg, msg


def test_lists_of_lists_hint_names_rows_of_lists(tmp_path: Path) -> None:
    """A column of token lists a row (``Sequence(Sequence(Value("int64")))``, rows of
    any number of lists of any length) asked for without ``shapes=``: the message named
    one shape per row and rows of items of one shape, not the ``(None, None)`` that
    reads it; the user had to find it in the docs."""
    features = datasets.Features(
        {"negs": datasets.Sequence(datasets.Sequence(datasets.Value("int64")))}
    )
    negs = [[[1, 2, 3], [4]], [], [[5, 6]]]
    datasets.Dataset.from_dict({"negs": negs}, features=features).save_to_disk(str(tmp_path / "d"))
    with pytest.raises(FormatError) as info:
        TableSource(tmp_path / "d", columns=["negs"], width=4)
    assert "shapes={'negs': (None, None)} and widths={'negs': (lists, items)}" in str(info.value)
    # What it says reads the rows as datasets gives them.
    src = TableSource(tmp_path / "d", columns=["negs"], shapes={"negs": (None, None)},
                      widths={"negs": (2, 3)}, shuffle=False)  # fmt: skip
    with Loader(src, batch_size=3, seed=0, epochs=1) as ld:
        batch = next(iter(ld))
    for j, row in enumerate(negs):
        got = [list(v[m]) for v, m in zip(batch["negs"][j], batch["negs_mask"][j], strict=True)]
        assert [g for g in got if g] == row


def test_mixture_refuses_image_folders_numbering_classes_apart(tmp_path: Path) -> None:
    """Two folder-labelled file sources (``ImageFolder``'s numbering: sorted class
    folders) whose class sets differ number a class differently: "dog" is 1 in one and
    0 in the other. Mixed, one batch held both meanings of a label."""
    from headrace.formats import FileSource, encode_npy

    for split, classes in (("a", ["cat", "dog"]), ("b", ["dog", "wolf"])):
        for c in classes:
            (tmp_path / split / c).mkdir(parents=True)
            for i in range(2):
                (tmp_path / split / c / f"{i}.npy").write_bytes(encode_npy(np.zeros(3, np.uint8)))
    a = FileSource(tmp_path / "a", format="npy", labels="folders")
    b = FileSource(tmp_path / "b", format="npy", labels="folders")
    assert a.classes == ("cat", "dog") and b.classes == ("dog", "wolf")
    with pytest.raises(ConfigError, match=r"'label' differently .*'cat', 'dog'.*'dog', 'wolf'"):
        Mixture({"a": a, "b": Filtered(b, lambda r, s: r["label"] >= 0)}, [1, 1], batch_size=4)
    # The fix docs/files.md gives, classes= the other's names: numbered alike, mixed.
    c = FileSource(tmp_path / "b", format="npy", labels="folders", classes=["cat", "dog", "wolf"])
    a3 = FileSource(tmp_path / "a", format="npy", labels="folders", classes=["cat", "dog", "wolf"])
    with Loader(Mixture({"a": a3, "b": c}, [1, 1], batch_size=4), batch_size=4, epochs=1) as ld:
        labels = {int(v) for batch in ld for v in batch["label"][batch["valid"]]}
    assert labels == {0, 1, 2}


def test_mixture_of_labelled_file_sources_reads(tmp_path: Path) -> None:
    """A mixture of two ``labels="folders"`` file sources of the same classes raised
    DataError at its first batch ("'a' gives {data, index, label} but 'a' gives {index,
    label}"): the empty read that finds a source's layout before the first batch gives a
    file source's label but not its data, and was taken for the whole layout."""
    from headrace.formats import FileSource, encode_npy

    for split in ("a", "b"):
        for k, c in enumerate(["cat", "dog"]):
            (tmp_path / split / c).mkdir(parents=True)
            for i in range(3):
                arr = np.full(3, 10 * k + i, np.uint8)
                (tmp_path / split / c / f"{i}.npy").write_bytes(encode_npy(arr))
    a = FileSource(tmp_path / "a", format="npy", labels="folders", shuffle="none")
    b = FileSource(tmp_path / "b", format="npy", labels="folders", shuffle="none")
    mix = Mixture({"a": a, "b": b}, [1, 1], batch_size=4)
    with Loader(mix, batch_size=4, seed=0, epochs=1) as ld:
        rows = [
            (int(batch["source"][j]), int(batch["label"][j]), int(batch["data"][j][0]))
            for batch in ld
            for j in np.flatnonzero(batch["valid"])
        ]
    # Each file read once from each source, with its folder's class.
    assert sorted(rows) == sorted(
        (s, k, 10 * k + i) for s in (0, 1) for k in (0, 1) for i in range(3)
    )
