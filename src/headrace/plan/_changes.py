"""What a refused state was saved with: its files and settings, named, with what changed.

A state's ``parts`` (:func:`~headrace.plan.fingerprint_parts`) digest each part of the
sources' description, so a refusal could say ``what differs: files, context``, but not
which file, nor what the context was: a digest names nothing. Beside them, two more
parts hold, as JSON text, the settings (:data:`SETTING_PART`: the description's
numbers, strings and flags, as ``context`` or ``sources.chat.context``) and the files
(:data:`FILE_PART`: their count and bytes and, for at most :data:`MAX_NAMED_FILES` of
them, each one's name and what the description says of it), so a refusal names the
setting or file that changed, with what it was and what it is. Files are what the
description holds: a token file's name, bytes, dtype and format; a table's or a
folder's file names and sizes; a row file's rows and width; every mixed source's, by
source. One part each, not one a file: a checkpointer that restores onto a target tree
(orbax, ``array_state``) needs the same keys on both sides, and a file added would
have changed them (the value's length may differ: it restores the saved one).
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator, Mapping
from itertools import islice
from typing import Any

import numpy as np

from headrace.errors import ConfigError

__all__ = [
    "FILE_PART",
    "MAX_NAMED_FILES",
    "NAMED_PARTS",
    "SETTING_PART",
    "changes",
    "formats_only",
    "json_value",
    "named_parts",
    "plain",
]

#: Files a state names one by one (about 60-150 bytes of JSON each); past it, a count.
MAX_NAMED_FILES = 32
#: The part naming the files (not a part of the description: the digests of the parts
#: that hold the files cover them).
FILE_PART = "files:named"
#: The part naming the settings (as :data:`FILE_PART`, not a part of the description).
SETTING_PART = "settings:named"
NAMED_PARTS = (FILE_PART, SETTING_PART)
#: Settings a state names (the description's scalars down to a mixed source's), and
#: the characters of a string setting it keeps.
_MOST_SETTINGS, _SETTING_CHARS = 64, 80
#: Differences a refusal lists before "and N more".
_MOST = 5
#: A digest (hex of 32 characters or more): a setting whose value it is names nothing.
_DIGEST = re.compile(r"[0-9a-f]{32,}")


def json_value(value: Any) -> Any:
    """``json.dumps``'s ``default`` for a description: what a source's own fingerprint
    holds that JSON has no type for but stands for a JSON value (a NumPy number or array,
    a path), as that value; anything else refused, by name. (A count as ``arr.sum()``
    or a ``pathlib`` path was "Object of type int64 is not JSON serializable", from
    inside json, naming neither.)"""
    if isinstance(value, np.generic | np.ndarray):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise ConfigError(
        f"the source's fingerprint holds {type(value).__name__} {value!r:.80}, which has no "
        "JSON form: fingerprint() must describe the data with JSON values (str, int, "
        "float, bool, None, and lists and dicts of them); convert it (str(...), int(...))"
    )


#: The types of JSON's own leaves, as a source's fingerprint holds them.
_LEAVES = frozenset({str, int, float, bool, type(None)})


def plain(value: Any) -> Any:
    """``value`` with what :func:`json_value` turns into JSON values so turned, containers
    kept as they are: the parts then name them as JSON would hold them."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        # Checked whole: 1M file names and 1M sizes took 0.3 s, where walked leaf by
        # leaf they took 6.6 s (2c, shared, 2026-12-06).
        if all(type(v) in _LEAVES for v in value):
            return value
        return type(value)(plain(v) for v in value)
    if isinstance(value, np.generic | np.ndarray | os.PathLike):
        return json_value(value)
    return value


def named_parts(fingerprint: dict[str, Any]) -> dict[str, str]:
    """The parts naming the settings and files of ``fingerprint`` (none for what it does
    not hold): the settings' values; the files' count and total bytes, and each file's
    name and description when there are at most :data:`MAX_NAMED_FILES`. ASCII text, as
    :func:`~headrace.plan.array_state` needs: names are JSON-escaped."""
    out: dict[str, str] = {}
    settings = dict(islice(_settings(fingerprint, ""), _MOST_SETTINGS))
    if settings:
        out[SETTING_PART] = _json(settings)
    files = list(_files(fingerprint, ()))
    if files:
        told: dict[str, Any] = {
            "count": len(files),
            "bytes": sum(_int(said.get("bytes")) for _, said in files),
        }
        if len(files) <= MAX_NAMED_FILES:
            told["files"] = [[name, said] for name, said in files]
        out[FILE_PART] = _json(told)
    return out


def changes(saved: dict[str, str], now: dict[str, str]) -> str:
    """What changed, from the parts of a saved state and of the loader refusing it: each
    setting, with its value then and now; each file resized (or of another dtype...),
    gone or new, or the same files in another order; with too many files to name, their
    counts. ``""`` where either side names nothing (a state saved before they were)."""
    files = _file_changes(_told(saved, FILE_PART), _told(now, FILE_PART))
    was, is_ = _told(saved, SETTING_PART), _told(now, SETTING_PART)
    if saved.get("schedule") == now.get("schedule"):
        # The same schedule: a state saved before switches were named lacks their lines.
        was, is_ = (
            None if d is None else {k: v for k, v in d.items() if not k.startswith("schedule.")}
            for d in (was, is_)
        )
    found = _setting_changes(was, is_, bool(files))
    found += files
    more = f"; and {len(found) - _MOST} more" if len(found) > _MOST else ""
    return "; ".join(found[:_MOST]) + more


def _setting_changes(
    was: dict[str, Any] | None, is_: dict[str, Any] | None, files_changed: bool
) -> list[str]:
    if was is None or is_ is None:
        return []
    keys = list({**was, **is_})
    told: list[str] = []
    if max(len(was), len(is_)) >= _MOST_SETTINGS:  # cut: a key one side lacks may be past it
        keys = [k for k in keys if k in was and k in is_]
    else:
        # A mixed source one side lacks is told once: each of its settings was told as
        # "not set (the default)" on that side, and the lines naming its files were cut.
        then, now = _mixed_names(was), _mixed_names(is_)
        if then is not None and now is not None:
            gone = [n for n in then if n not in now]
            new = [n for n in now if n not in then]
            told = [f"source {n!r} is gone" for n in gone] + [f"source {n!r} is new" for n in new]
            every = sorted({*then, *now}, key=len, reverse=True)  # "a.b" before "a"
            keys = [k for k in keys if _source_of(k, every) not in {*gone, *new}]
    return told + [
        f"{key}: {_value(was.get(key, _UNSET), key)} when the state was saved, "
        f"{_value(is_.get(key, _UNSET), key)} now{_hint(key, was.get(key), is_.get(key))}"
        for key in keys
        if was.get(key, _UNSET) != is_.get(key, _UNSET)
        and not _later(key, was)
        and not _follows(key, was, is_, files_changed)
    ]


def _mixed_names(settings: dict[str, Any]) -> list[str] | None:
    """The names of a side's mixed sources, in order, from its weights (one setting a
    source, :func:`_weights`): none for a side that is no mixture; ``None`` where they
    cannot be told (a state saved before weights were named)."""
    if settings.get("kind") != "mixture":
        return []
    names = [k.removeprefix("weights.") for k in settings if k.startswith("weights.")]
    return names or None


def _source_of(key: str, names: list[str]) -> str | None:
    """The mixed source a setting belongs to (``sources.NAME.``, or ``weights.NAME``),
    of ``names``, longest first: a name may hold dots."""
    for name in names:
        if key.startswith(f"sources.{name}.") or key == f"weights.{name}":
            return name
        if key.startswith("schedule.") and key.split(".", 2)[2:] == [name]:
            return name
    return None


def _follows(key: str, was: dict[str, Any], is_: dict[str, Any], files_changed: bool) -> bool:
    """A setting that differs only because another does, named already: ``png16`` is in
    the description of PNGs decoded as stored, so it comes and goes with ``image_mode``;
    a digest over the files (a table's schema digest) changes with the files, and its
    two hashes said nothing the files' line does not (until 2026-12-03)."""
    if files_changed and all(
        isinstance(v, str) and _DIGEST.fullmatch(v) for v in (was.get(key), is_.get(key))
    ):
        return True
    mode = key.removesuffix("png16") + "image_mode"
    return key.endswith("png16") and was.get(mode, _UNSET) != is_.get(mode, _UNSET)


def _hint(key: str, was: Any, is_: Any) -> str:
    """How to get back what a default that changed gave, where one did."""
    # Compared as a pair, not a set: a hand-edited state's list value is unhashable.
    if key.endswith("shuffle") and (was, is_) in ((True, "window"), ("window", True)):
        # TableSource's default resolves by where the files are (and what they are).
        return (
            " (a TableSource's default, shuffle=True, shuffles local Arrow files (a "
            "save_to_disk folder) in full and Parquet or anything on object storage by "
            f"windows: pass shuffle={'full' if was is True else 'window'!r} to resume this "
            "state, and the same shuffle= wherever the run goes on)"
        )
    if key.endswith("pad_values.labels") and was == 0 and is_ == -100:
        # TableSource pads a `labels` column with ignore_index since 2026-12-03.
        return (
            " (a TableSource pads a 'labels' column with ignore_index -100 since "
            "2026-12-03; pad_values={'labels': 0} pads it as the state was saved)"
        )
    if key.endswith("window_tokens") and isinstance(was, int) and was > 0:
        # A token source describes its window_bytes in tokens: no parameter has this
        # name, and the shuffle goes window by window, so another window_bytes (an I/O
        # knob, to look at it) is another order. Until 2026-12-07 told by this name alone.
        return (
            " (a token source's window_bytes over its tokens' item size: the saved run "
            f"had window_bytes={was * 2:,} for 2-byte tokens, {was * 4:,} for 4-byte; "
            "the default is 268,435,456; give it to resume exactly)"
        )
    if key.endswith("png16") and was is None and is_ == "uint16":
        # PNG16_PART (formats); the way on is in the refusal (plan/_state.py).
        return (
            " (since 2026-12-02 a 16-bit RGB, RGBA or grey + alpha PNG decodes to uint16, "
            'every bit, not its high bytes as uint8: docs/files.md, "16-bit PNGs")'
        )
    return ""


#: Token file formats that hold their tokens from the file's first byte (a Megatron
#: ``.bin``'s documents are in its ``.idx``, a nanoGPT file's dtype is its name's): the
#: same file described as another of them reads the same samples.
_SAME_TOKENS = frozenset({"raw", "nanogpt", "megatron"})


def formats_only(saved: Mapping[str, str], now: Mapping[str, str]) -> list[str]:
    """The files (named as :func:`changes` names them) whose descriptions differ only in
    a format of :data:`_SAME_TOKENS`, where the two sides' settings and files differ in
    nothing else; ``[]`` otherwise (or where either side names none)."""
    if saved.get(SETTING_PART) is None or saved.get(SETTING_PART) != now.get(SETTING_PART):
        return []
    told, telling = _told(dict(saved), FILE_PART), _told(dict(now), FILE_PART)
    was = None if told is None else _named(told)
    is_ = None if telling is None else _named(telling)
    if was is None or is_ is None or list(was) != list(is_):
        return []
    found = []
    for name, said in was.items():
        if said == is_[name]:
            continue
        differ = {k for k in {**said, **is_[name]} if said.get(k) != is_[name].get(k)}
        if differ != {"format"} or not {said.get("format"), is_[name].get("format")} <= (
            _SAME_TOKENS
        ):
            return []
        found.append(name)
    return found


def _file_changes(told: dict[str, Any] | None, telling: dict[str, Any] | None) -> list[str]:
    if told is None or telling is None:
        return []
    was, is_ = _named(told), _named(telling)
    if was is None or is_ is None:
        counted = _counts(told, telling)
        return [counted] if counted else []
    found = [
        f"{name}: {_differ(said, is_[name])}"
        for name, said in was.items()
        if name in is_ and is_[name] != said
    ]
    found += [f"{name} ({_what(said)}) is gone" for name, said in was.items() if name not in is_]
    found += [f"{name} ({_what(said)}) is new" for name, said in is_.items() if name not in was]
    if not found and list(was) != list(is_):
        found.append(
            f"the same files in another order (saved: {', '.join(was)}; now: "
            f"{', '.join(is_)}): a list made by a glob or a directory listing follows "
            "the directory's order; sort it"
        )
    return found


def _differ(was: dict[str, Any], is_: dict[str, Any]) -> str:
    """``80,000 bytes when the state was saved, 76,000 bytes now``: what differs."""
    keys = [k for k in {**was, **is_} if was.get(k) != is_.get(k)]
    before, after = _what({k: was.get(k) for k in keys}), _what({k: is_.get(k) for k in keys})
    return f"{before} when the state was saved, {after} now"


def _told(parts: dict[str, str], key: str) -> dict[str, Any] | None:
    """A side's named part ``key``, read (``None``: none, or not in this form)."""
    try:
        told = json.loads(parts[key])
    except (KeyError, ValueError, TypeError):
        return None
    return told if isinstance(told, dict) else None


def _named(told: dict[str, Any]) -> dict[str, dict[str, Any]] | None:
    """``{name: description}`` of the files a side names, in order (``None``: too many
    to name, or not in this form)."""
    out: dict[str, dict[str, Any]] = {}
    for entry in told.get("files") or ():
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], dict)):
            return None
        out[str(entry[0])] = entry[1]
    return out or None


def _counts(told: dict[str, Any], telling: dict[str, Any]) -> str:
    """The files' count and bytes on each side, where they differ."""
    (n0, b0), (n1, b1) = [(_int(t.get("count")), _int(t.get("bytes"))) for t in (told, telling)]
    if (n0, b0) == (n1, b1):
        return ""
    return (
        f"the state was saved on {n0:,} files of {b0:,} bytes, these sources have "
        f"{n1:,} of {b1:,} (too many to name each: a state names up to "
        f"{MAX_NAMED_FILES})"
    )


#: A setting one side does not have (added to the description only where set).
_UNSET = object()


def _value(value: Any, key: str = "") -> str:
    if value is _UNSET:
        return "no switch" if key.startswith("schedule.") else "not set (the default)"
    return json.dumps(value, ensure_ascii=False)


def _settings(value: dict[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    """``(key, value)`` of the description's numbers, strings, flags and ``None`` s, at
    its top and in its mappings (``sources.chat.context``), never inside a file's or a
    list's: those are the files'; a mixture's weights, by source (``weights.chat``)."""
    for key, item in value.items():
        name = f"{prefix}{key}"
        if item is None or isinstance(item, bool | int | float):
            yield name, item
        elif isinstance(item, str):
            yield name, item[:_SETTING_CHARS]
        elif isinstance(item, dict) and not isinstance(item.get("path"), str):
            yield from _settings(item, f"{name}.")
    if value.get("kind") == "mixture":
        yield from _weights(value, prefix)


def _weights(value: dict[str, Any], prefix: str) -> Iterator[tuple[str, Any]]:
    """A mixture's weights (held as integers of a sum of 2**16) as fractions of their sum,
    to 3 digits (0.1 is 6,553 or 6,554 of 2**16, as the others' remainders fall), by
    source name: ``weights.chat: 0.7``."""
    weights, sources = value.get("weights"), value.get("sources")
    if not (isinstance(weights, list) and isinstance(sources, dict)):
        return
    if len(weights) != len(sources) or not all(type(w) is int for w in weights):
        return
    total = sum(weights) or 1
    for name, w in zip(sources, weights, strict=True):
        yield f"{prefix}weights.{name}", float(f"{w / total:.3g}")
    # A curriculum's switches (named since 2026-12-07), so a state says which schedule
    # it was saved with, and a refusal which switch changed.
    for switch in value.get("schedule") or ():
        if not (isinstance(switch, list) and len(switch) == 2 and isinstance(switch[1], list)):
            return
        step, nums = switch
        if len(nums) != len(sources) or not all(type(w) is int for w in nums):
            return
        total = sum(nums) or 1
        for name, w in zip(sources, nums, strict=True):
            yield f"{prefix}schedule.{step}.{name}", float(f"{w / total:.3g}")


def _later(key: str, was: dict[str, Any]) -> bool:
    """A setting the saved side lacks because states did not name it when saved (a
    mixture's weights, named since 2026-12-03): not a change."""
    return key not in was and key.startswith("weights.")


def _files(value: Any, within: tuple[str, ...]) -> Iterator[tuple[str, dict[str, Any]]]:
    """``(name, what the description says of it)`` of every file a description holds,
    in its order; ``within``: the mixed sources it lies in."""
    if isinstance(value, list):
        for item in value:
            yield from _files(item, within)
        return
    if not isinstance(value, dict):
        return
    path = value.get("path")
    if isinstance(path, str):  # a token or row file
        yield _name(path, within), {k: v for k, v in value.items() if k != "path"}
        return
    kind = value.get("kind")
    files, paths = value.get("files"), value.get("paths")
    if isinstance(files, list) and isinstance(paths, list) and len(files) == len(paths):
        # Files of one base name in several folders: their paths below the common one.
        for path, entry in zip(paths, files, strict=True):
            for _, said in _files(entry if isinstance(entry, dict) else [entry], within):
                yield _name(str(path), within), said
        return
    if kind == "files":  # a FileSource: its keys and their sizes
        for key, size in zip(value.get("keys") or (), value.get("sizes") or (), strict=False):
            yield _name(str(key), within), {"bytes": size}
        return
    if kind == "table":  # a TableSource: [name, size] a file
        for entry in value.get("files") or ():
            if isinstance(entry, list) and len(entry) == 2:
                yield _name(str(entry[0]), within), {"bytes": entry[1]}
        return
    for key, item in value.items():
        if kind == "mixture" and key == "sources" and isinstance(item, dict):
            for name, source in item.items():
                yield from _files(source, (*within, str(name)))
        else:
            yield from _files(item, within)


def _name(path: str, within: tuple[str, ...]) -> str:
    return path if not within else f"{path} of source {'/'.join(within)!r}"


def _what(described: dict[str, Any]) -> str:
    """``1,048,576 bytes, uint16, format raw``: a file's description, for a person."""
    out = []
    for key, value in described.items():
        if value is None:
            out.append(f"no {key}")
        elif key in ("bytes", "rows") and isinstance(value, int):
            out.append(f"{value:,} {key}")
        elif key == "dtype" and isinstance(value, str):
            out.append(_dtype(value))
        else:
            out.append(f"{key} {value}")
    return ", ".join(out)


def _dtype(text: str) -> str:
    try:
        dtype = np.dtype(text)
    except TypeError:
        return f"dtype {text}"
    return dtype.name if dtype.isnative or dtype.byteorder == "|" else f"dtype {text}"


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), default=json_value)


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0
