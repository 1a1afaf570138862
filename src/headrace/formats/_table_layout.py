"""Which files of a folder (or an object-store prefix) make a table.

Shared by local folders and prefixes on object storage, so both refuse and
choose alike: a ``save_to_disk`` folder's ``state.json`` names its shards in
order; otherwise the ``.arrow`` or the ``.parquet`` files right in the folder,
refused where a pick would silently read other rows (a datasets cache's
map/filter results beside the data, several splits, both formats).
"""

from __future__ import annotations

import fnmatch
import json
import logging
import re
from typing import Any

from headrace.errors import ConfigError, FormatError

__all__ = [
    "DELTA_LOG",
    "HF_METADATA",
    "IPC_SUFFIXES",
    "RECOPY",
    "folder_files",
    "is_split_name",
    "refuse_delta",
    "state_files",
    "state_fingerprint",
]

log = logging.getLogger("headrace")
#: What a refusal of a damaged table file says to do (after naming file and place).
RECOPY = "copy the file again (a partial copy or download?) or leave it out of the table"
#: Names of Arrow IPC files (file or stream format); any other table file is Parquet.
IPC_SUFFIXES = (".arrow", ".feather", ".ipc", ".arrows")
# A folder's table files: its Arrow IPC files (pyarrow.feather writes .feather, Polars
# .ipc and .arrows: left out of a folder until 2026-12-07, "empty dataset"), or Parquet.
_TABLE_SUFFIXES = (*IPC_SUFFIXES, ".parquet")

#: The folder beside a Delta Lake table's files that says which of them hold its rows.
DELTA_LOG = "_delta_log"
# The JSON files beside a save_to_disk dataset's shards.
HF_METADATA = ("state.json", "dataset_info.json", "dataset_dict.json")
# What map/filter/shuffle/select name their results in a datasets cache (a fingerprint).
_HF_CACHE = re.compile(r"cache-[0-9a-f]{16}(?:_\d{5}_of_\d{5})?\.arrow$")
#: The shards save_to_disk writes, numbered of a count.
_SAVED_SHARD = re.compile(r"data-(\d{5})-of-(\d{5})\.arrow")
_HF_SPLIT = re.compile(r"-(?P<split>[A-Za-z0-9_.]+?)(?:-\d{5}-of-\d{5})?\.arrow$")
# A shard of a split as the Hub and datasets name them, Parquet or Arrow:
# [<builder>-]<split>-00000-of-00002[-<hash>].parquet
_HF_SHARD = re.compile(
    r"(?:^|-)(?P<split>[A-Za-z0-9_.]+?)-\d{5}-of-\d{5}(?:-[0-9a-f]+)?\.(?:arrow|parquet)$"
)
# Names of splits (datasets' keywords) that a file of one split is often named after:
# train.parquet, squad-validation.parquet.
_SPLIT_WORDS = frozenset(
    {
        "train",
        "training",
        "validation",
        "valid",
        "val",
        "dev",
        "test",
        "testing",
        "eval",
        "evaluation",
    }
)


def _parse_state(where: str, text: str) -> dict[str, Any]:
    try:
        saved = json.loads(text)
        if not isinstance(saved, dict):
            raise TypeError(f"a JSON {type(saved).__name__}, not an object")
    except (ValueError, TypeError, RecursionError) as exc:
        raise FormatError(
            f"{where}: not a save_to_disk state file: expected "
            f'{{"_data_files": [{{"filename": ...}}, ...]}} ({exc!r})'
        ) from exc
    return saved


def state_files(root: str, where: str, text: str) -> list[str]:
    """The shard file names a ``save_to_disk`` folder's ``state.json`` (at ``where``, in
    ``root``) lists, in order."""
    saved = _parse_state(where, text)
    try:
        files = [str(e["filename"]) for e in saved["_data_files"]]
        indices = saved.get("_indices_data_files")
    except (KeyError, TypeError, AttributeError) as exc:
        raise FormatError(
            f"{where}: not a save_to_disk state file: expected "
            f'{{"_data_files": [{{"filename": ...}}, ...]}} ({exc!r})'
        ) from exc
    if indices:
        # datasets 1.x saved a shuffled/selected/filtered dataset as its whole table
        # plus the row numbers it shows; reading the table alone reads other rows.
        mapping = [e.get("filename") if isinstance(e, dict) else e for e in indices]
        raise FormatError(
            f"{where} lists an indices mapping {mapping} (the rows a shuffle, select, "
            "filter or sort picked, written by an old datasets version); headrace reads "
            "the data files in stored order and does not apply it: load the folder with "
            "that datasets version and save it again after ds.flatten_indices()"
        )
    if not files:
        raise FormatError(f"{root}: empty dataset: {where} lists no data files (0 rows)")
    for name in files:
        if name in ("", ".", "..") or "/" in name or "\\" in name:
            # save_to_disk lists bare names in the folder; a path would read elsewhere.
            raise FormatError(
                f"{where} lists data file {name!r}, not a file name in the folder: "
                "save_to_disk writes names like data-00000-of-00001.arrow"
            )
    shards = [_SAVED_SHARD.fullmatch(n) for n in files]
    if all(shards):
        said = {int(m[2]) for m in shards if m}
        have = sorted(int(m[1]) for m in shards if m)
        if len(said) == 1 and have != list(range(next(iter(said)))):
            # A list cut or edited: the rows of the shards left out were never read.
            raise FormatError(
                f"{where} lists shards {have} of data-NNNNN-of-{next(iter(said)):05d}.arrow; "
                f"expected each of 0 to {next(iter(said)) - 1} once: a damaged state file, "
                "or one written for other shards"
            )
    return files


def state_fingerprint(text: str) -> str | None:
    """The ``_fingerprint`` in a ``state.json``'s text (``None``: none, or not JSON).

    ``datasets`` derives it from the data's history (source, every transform and its
    arguments), so two saves of other shuffles of one dataset, with the same file names
    and sizes, differ here: a state saved on one is not resumed on the other.
    """
    try:
        fp = json.loads(text).get("_fingerprint")
    except (ValueError, AttributeError):
        return None
    return fp if isinstance(fp, str) else None


def folder_files(root: str, names: list[str], join: str) -> list[str]:
    """The table files among ``names`` (a folder's entries, no ``state.json``), as
    ``root + join + name``; refused where picking would read other rows than meant.
    Hidden names (macOS's ``._x.parquet`` beside each ``x.parquet``, not Parquet) are
    left out, as pyarrow's datasets leave them, with a warning that counts them."""
    hidden = sorted(n for n in names if n.startswith(".") and n.endswith(_TABLE_SUFFIXES))
    if hidden:
        log.warning(
            "%s: skipped %d hidden table file(s) (a name starting with '.', e.g. %r: "
            "macOS's ._ files); pass a list of paths to read such files",
            root,
            len(hidden),
            hidden[0],
        )
    names = sorted(n for n in names if not n.startswith("."))
    arrow = [n for n in names if n.endswith(IPC_SUFFIXES)]
    parquet = [n for n in names if n.endswith(".parquet")]
    cached = [n for n in arrow if _HF_CACHE.match(n)]
    if cached:
        raise ConfigError(
            f"{root} holds datasets cache files ({', '.join(cached[:3])}"
            f"{', ...' if len(cached) > 3 else ''}): results of map, filter, shuffle or "
            "select, some of them only row numbers (indices mappings), beside the dataset's "
            "own files; which of them a Dataset shows is held in memory. Write the dataset "
            "you use with ds.save_to_disk(folder) and open that folder, or pass its files "
            "(a glob such as '*-train*.arrow', or one map result's cache file)"
        )
    if arrow and parquet:
        # (a .feather beside Parquet files was left out without a word until 2026-12-07)
        raise ConfigError(
            f"{root} holds both .arrow and .parquet files (Arrow IPC {arrow[0]} beside "
            f"{parquet[0]}); pass a glob or a list"
        )
    chosen = arrow or parquet
    if not chosen:
        raise FormatError(
            f"{root}: empty dataset: no .arrow or .parquet files (nor "
            f"{', '.join(IPC_SUFFIXES[1:])}), no state.json"
        )
    splits = {n: split for n in chosen if (split := _split_of(n)) is not None}
    split_names = sorted(set(splits.values()))
    if len(split_names) > 1:
        first = split_names[0]
        kind = "Arrow" if arrow else "Parquet"
        raise ConfigError(
            f"{root} holds {kind} files of several splits {split_names}; reading them as one "
            f"table would mix the splits: open one with a glob, e.g. "
            f"{root + join + _split_glob(first, chosen, splits)!r} (if they are parts of "
            f"one table, not splits, pass {root + join + '*.' + chosen[0].rsplit('.', 1)[1]!r})"
        )
    return [root + join + n for n in chosen]


def _split_of(name: str) -> str | None:
    """The split a table file's name says it holds (``None``: it says none)."""
    if m := _HF_SHARD.search(name):
        return m.group("split")
    if name.endswith(".arrow") and (m := _HF_SPLIT.search(name)):
        return m.group("split")
    word = name.rsplit(".", 1)[0].rsplit("-", 1)[-1]
    return word if word.lower() in _SPLIT_WORDS else None


def is_split_name(name: str) -> bool:
    """Whether ``name`` (a folder's) is the name of a split: ``train``, ``validation``..."""
    return name.lower() in _SPLIT_WORDS


def _split_glob(split: str, names: list[str], splits: dict[str, str]) -> str:
    """A glob that matches exactly the files of ``split`` among ``names``."""
    ext = "." + names[0].rsplit(".", 1)[1]
    mine = sorted(n for n in names if splits.get(n) == split)
    for glob in (f"{split}-*{ext}", f"*-{split}-*{ext}", f"*-{split}{ext}", f"{split}{ext}"):
        if sorted(fnmatch.filter(names, glob)) == mine:
            return glob
    return mine[0]


def refuse_delta(root: str) -> None:
    """Refuse the Delta Lake table at ``root`` (a folder or prefix with a ``_delta_log``).

    Its log, not its folder, says which Parquet files hold its rows: an overwrite,
    delete or compaction removes files from the table long before ``VACUUM`` deletes
    them (7 days by default), so the folder's files read together give removed rows
    beside their replacements.
    """
    raise ConfigError(
        f"{root} is a Delta Lake table ({DELTA_LOG}/ beside its files): its log says "
        "which of the Parquet files hold its rows now, and files an overwrite, delete or "
        "compaction removed stay until VACUUM; headrace does not read the log: pass the "
        f"table's current files as a list, e.g. deltalake's DeltaTable({root!r}).file_uris()"
    )
