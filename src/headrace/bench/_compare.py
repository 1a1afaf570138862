"""``headrace bench compare A.json B.json``: ratios B / A per (workload, variant)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from typing import IO, Any

from headrace.bench._report import (
    SCHEMA_VERSION,
    au_text,
    au_thresholds,
    fresh_pass_rate,
    fresh_pass_steps,
    fresh_passes,
    max_acc_text,
    rate_text,
    short_au,
    short_au_note,
)
from headrace.errors import ConfigError

__all__ = ["MAX_AU_DROP", "MAX_SLOWDOWN", "compare", "load_report"]

#: ``--max-slowdown``'s default, in percent: a variant slower in B than in A beyond the
#: trials' spread and by more than this fails compare (exit 1).
MAX_SLOWDOWN = 5.0
#: ``--max-au-drop``'s default, in points of AU x 100 (as DLIO prints it): a variant whose AU
#: is lower in B than in A beyond the trials' spread and by more than this fails compare.
MAX_AU_DROP = 5.0
#: Trials (files workloads: fresh passes) each report needs before compare calls a change
#: slower or faster: every one of B's n below every one of A's m happens by chance once in
#: C(n + m, n) runs of the same speed (3 and 3: 1 in 20; 2 and 2: 1 in 6).
MIN_TRIALS = 3


def load_report(path: str, *, reports: str = "two reports") -> dict[str, Any]:
    """A ``--json`` report, or a ConfigError saying what is wrong with the file (``reports``:
    what the command takes, for the message: compare two reports, plot one). ``-``: the
    report on stdin (as ``--json -`` writes one), named "stdin" in messages."""
    if path == "-":
        # `headrace bench --json - | headrace bench compare A.json -` read a file named '-'.
        return _report("stdin", sys.stdin)
    try:
        f = open(path)  # closed below: its errors told apart from the report's
    except FileNotFoundError:
        raise ConfigError(
            f"{path}: no such file; give {reports} written by 'headrace bench --json PATH'"
        ) from None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None
    with f:
        return _report(path, f)


def _report(path: str, f: IO[str]) -> dict[str, Any]:
    """:func:`load_report` of the open ``f`` (``path``: its name in messages)."""
    try:
        report = json.load(f, parse_constant=lambda name: _no_constant(path, name))
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: cannot be read ({exc})") from None
    except json.JSONDecodeError as exc:
        empty = "; nothing was piped in" if path == "stdin" and not exc.doc.strip() else ""
        raise ConfigError(
            f"{path}: not JSON ({exc}{empty}); expected a report written by 'headrace bench --json'"
        ) from None
    results = report.get("results") if isinstance(report, dict) else None
    if not isinstance(results, list) or not all(
        isinstance(r, dict) and {"workload", "variant", "batches_per_s", "digest"} <= r.keys()
        for r in results
    ):
        raise ConfigError(
            f"{path}: not a headrace bench report (expected a 'results' list of "
            "{workload, variant, batches_per_s, digest}); write one with 'headrace bench --json'"
        )
    if "schema" in report and report["schema"] != SCHEMA_VERSION:
        # "schema": 999 (a newer or a foreign format) was read as this one without a word.
        raise ConfigError(
            f"{path}: schema {report['schema']!r}: this headrace reads {SCHEMA_VERSION!r} "
            "reports; use the headrace that wrote it, or write the report again with "
            "'headrace bench --json'"
        )
    _check_types(path, report)
    return report  # type: ignore[no-any-return]


def _no_constant(path: str, name: str) -> Any:
    """Refuse NaN and Infinity, which Python's json reads and JSON has not: compare
    printed "nan" batches/s and a "nanx" ratio as figures."""
    raise ConfigError(
        f"{path}: not JSON ({name} is no JSON number; a figure not measured is null); "
        "expected a report written by 'headrace bench --json'"
    )


# What each JSON type is in Python (a bool is no number, as JSON Schema has it).
_TYPES: dict[str, tuple[type, ...]] = {
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "object": (dict,),
    "array": (list,),
    "null": (type(None),),
}


def _schema() -> dict[str, Any]:
    """The report's JSON Schema, shipped beside this module (report.schema.json)."""
    with open(os.path.join(os.path.dirname(__file__), "report.schema.json")) as f:
        return json.load(f)  # type: ignore[no-any-return]


def _of_type(value: Any, types: str | list[str]) -> bool:
    kinds = [types] if isinstance(types, str) else types
    return any(
        isinstance(value, _TYPES[k]) and not (isinstance(value, bool) and k != "boolean")
        for k in kinds
    )


#: What a type is called in a refusal.
_SAID = {
    "string": "a string",
    "integer": "a whole number",
    "number": "a number",
    "boolean": "true or false",
    "object": "an object",
    "array": "a list",
    "null": "null",
}
#: A result's fields that may not be null (compare and plot name and rate results by them).
_NAMED = ("workload", "variant", "batches_per_s")


def _check_types(path: str, report: dict[str, Any]) -> None:
    """Refuse a report a field of which is of another type than the report's schema
    says, naming the file and the field (``results[0].batches_per_s``): until 2026-12-06
    a null batches_per_s, a "machine" that was a string, or "workloads": 5 ended compare
    or plot in a traceback. A field left out is let be (hand-made reports leave most
    out), as is a null one but a result's workload, variant and batches_per_s."""

    def refuse(where: str, value: Any, types: str | list[str]) -> ConfigError:
        shown = json.dumps(value)
        shown = shown if len(shown) <= 40 else shown[:37] + "..."
        kinds = [types] if isinstance(types, str) else [t for t in types if t != "null"]
        said = " or ".join(_SAID[k] for k in kinds)
        return ConfigError(
            f"{path}: {where or 'the report'} is {shown}, expected {said}; give a report "
            "written by 'headrace bench --json'"
        )

    def walk(value: Any, schema: dict[str, Any], where: str) -> None:
        types = schema.get("type")
        named = where.rpartition(".")[2] in _NAMED and where.startswith("results[")
        if types is not None and (value is not None or named) and not _of_type(value, types):
            raise refuse(where, value, types)
        if isinstance(value, dict):
            others = schema.get("additionalProperties")
            for key, v in value.items():
                sub = schema.get("properties", {}).get(key, others)
                if isinstance(sub, dict):
                    walk(v, sub, f"{where}.{key}" if where else key)
        elif isinstance(value, list) and isinstance(schema.get("items"), dict):
            for i, v in enumerate(value):
                walk(v, schema["items"], f"{where}[{i}]")

    walk(report, _schema(), "")


def _rate(r: dict[str, Any]) -> float:
    """The batches/s the report's table shows: a files workload's fresh pass (its trials
    start from a queue filled while other variants ran), else the trials' median."""
    rate = fresh_pass_rate(r)
    return float(r["batches_per_s"]) if rate is None else rate


# What makes two runs of a workload read the same samples: its data and its plan. The
# reader's settings and the storage may differ (comparing them is what runs are for).
_TRAIN_KEYS = ("batch_size", "seed", "world_size", "rank")
# The [reader] settings that are the plan's too: a windowed shuffle's windows (token kinds'
# window_mib, Parquet's and tables' window_rows) decide which samples each step reads.
_PLAN_READER_KEYS = ("window_mib", "window_rows")


def _definitions(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each workload's definition as the report records it (hand-made reports: none)."""
    out: dict[str, dict[str, Any]] = {}
    for w in report.get("workloads") or []:
        if isinstance(w, dict) and isinstance(w.get("workload"), dict):
            out[str(w.get("name"))] = w["workload"]
    return out


def _differences(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    """``key A vs B`` for each setting of the data or the plan that two runs do not share."""
    if old is None or new is None:
        return []
    said = []
    if old.get("kind") != new.get("kind"):
        said.append(f"kind {old.get('kind')} vs {new.get('kind')}")
    a, b = old.get("dataset") or {}, new.get("dataset") or {}
    said += [
        f"dataset.{k} {a.get(k)} vs {b.get(k)}" for k in sorted({*a, *b}) if a.get(k) != b.get(k)
    ]
    a, b = old.get("train") or {}, new.get("train") or {}
    said += [f"train.{k} {a.get(k)} vs {b.get(k)}" for k in _TRAIN_KEYS if a.get(k) != b.get(k)]
    # Until 2026-12-07 other windows read DIFFERS, exit 1, as if the loader had broken.
    a, b = old.get("reader") or {}, new.get("reader") or {}
    said += [
        f"reader.{k} {a.get(k)} vs {b.get(k)}" for k in _PLAN_READER_KEYS if a.get(k) != b.get(k)
    ]
    return said


def _storage(report: dict[str, Any]) -> dict[str, str]:
    """What each workload of a report read from, in words (hand-made reports: nothing)."""
    fstype = ((report.get("machine") or {}).get("storage") or {}).get("fstype")
    out: dict[str, str] = {}
    for w in report.get("workloads") or []:
        if not isinstance(w, dict) or w.get("storage") is None:
            continue
        if w.get("slowfs"):
            said = f"slowfs, {w['slowfs'].get('read_latency_ms', 0):g} ms per READ"
        elif w.get("s3"):
            ms = w["s3"].get("latency_ms")
            said = f"S3, {ms:g} ms added to each request" if ms else "S3, no latency added"
        elif w["storage"] == "local":
            said = f"local disk ({fstype})" if fstype else "local disk"
        else:
            said = str(w["storage"])
        out[str(w.get("name"))] = said
    return out


def _machine(report: dict[str, Any]) -> str | None:
    """The machine a report ran on, in the figures that move a loader's rates."""
    m = report.get("machine")
    if not isinstance(m, dict):
        return None
    cores = m.get("cores_usable", m.get("cores"))
    return f"{m.get('cpu_model')}, {cores} cores, {(m.get('memory_bytes') or 0) / 1e9:.1f} GB"


def _compute(report: dict[str, Any]) -> dict[str, tuple[Any, ...]]:
    """Each workload's simulated compute, what its AU is measured against: (accelerators,
    computation_time, its stdev, au_threshold); a workload without compute is left out."""
    out: dict[str, tuple[Any, ...]] = {}
    for w in report.get("workloads") or []:
        if not isinstance(w, dict) or not isinstance(w.get("workload"), dict):
            continue
        train = w["workload"].get("train") or {}
        t, sd = train.get("computation_time"), train.get("computation_time_stdev")
        # Hand-made reports: a field left out, or of another type, is let be.
        if not isinstance(t, int | float) or isinstance(t, bool) or t <= 0:
            continue
        out[str(w.get("name"))] = (
            w.get("accelerators", 1),
            t,
            sd if _number(sd) else 0.0,
            train.get("au_threshold"),
        )
    return out


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _compute_text(c: tuple[Any, ...], threshold: bool) -> str:
    n, t, sd, au = c
    said = f"{n} accelerator{'' if n == 1 else 's'}, {t * 1e3:.4g} ms a step"
    said += f" (stdev {sd * 1e3:.4g} ms)" if sd else ""
    return said + (f", AU threshold {au}" if threshold else "")


def _trials(definition: dict[str, Any] | None) -> str:
    train = (definition or {}).get("train") or {}
    return f"{train.get('trials')} trials of {train.get('steps')} steps"


def _notes(a: dict[str, Any], b: dict[str, Any], other: dict[str, list[str]]) -> list[str]:
    """What the two reports did not share, said before their ratios: the machine, each
    workload's storage and trials (B/A measures those too), its simulated compute (the AU
    columns measure it too), and data or plan (B/A of samples/s, digests not compared).
    `compare` of a local run against one on S3 at 20 ms said nothing of it: its 0.02x read
    as a loader's regression."""
    notes = [
        f"{side} was interrupted (Ctrl-C or SIGTERM): its figures are of the trials it "
        "finished, and what it did not measure is left out (its notes say which)"
        for side, report in (("A", a), ("B", b))
        if report.get("interrupted")
    ]
    ma, mb = _machine(a), _machine(b)
    if ma is not None and mb is not None and ma != mb:
        notes.append(f"the reports ran on other machines (A: {ma}; B: {mb}): B/A compares them too")
    sa, sb = _storage(a), _storage(b)
    defs_a, defs_b = _definitions(a), _definitions(b)
    notes += [
        f"{name}: the reports read other storage (A: {sa[name]}; B: {sb[name]}): "
        "B/A compares the storage too, not the loader alone"
        for name in sorted(sa.keys() & sb.keys())
        if sa[name] != sb[name]
    ]
    for name in sorted(defs_a.keys() & defs_b.keys()):
        ta, tb = _trials(defs_a[name]), _trials(defs_b[name])
        if ta != tb:
            notes.append(f"{name}: the reports ran {ta} (A) and {tb} (B)")
    ca, cb = _compute(a), _compute(b)
    # A side without compute has no AU to misread: its AU cells are "-".
    for name in sorted(ca.keys() & cb.keys()):
        if ca[name] != cb[name]:
            threshold = ca[name][3] != cb[name][3]
            notes.append(
                f"{name}: the reports simulated other compute (A: "
                f"{_compute_text(ca[name], threshold)}; B: {_compute_text(cb[name], threshold)}"
                "): their AU compares that too, not the storage alone"
            )
    # A report written before the warm-up epoch counted each stream's first, cold epoch in
    # its AU: beside one that leaves it out, AU rose by the change of definition alone.
    warm = [_warmed(report) for report in (a, b)]
    for name in sorted(warm[0].keys() & warm[1].keys()):
        if warm[0][name] != warm[1][name]:
            cold = "A" if warm[1][name] else "B"
            notes.append(
                f"{name}: {cold}'s AU counts each stream's first epoch (written before the "
                "warm-up epoch, 2026-12-07), the other's leaves it out (au_warmup): their AU "
                "compares that too"
            )
    notes += [
        f"{name}: the reports ran other data or another plan ({'; '.join(said)}): "
        "their samples differ, so digests are not compared; B/A is of samples/s"
        for name, said in other.items()
    ]
    return notes


def _warmed(report: dict[str, Any]) -> dict[str, bool]:
    """Each workload with AU: whether its AU left a warm-up epoch out (its results have
    ``au_warmup``; reports written before 2026-12-07 have none)."""
    out: dict[str, bool] = {}
    for r in report["results"]:
        if r.get("au") is not None:
            out[str(r["workload"])] = out.get(str(r["workload"]), False) or "au_warmup" in r
    return out


def _batch(definition: dict[str, Any] | None) -> int:
    train = (definition or {}).get("train") or {}
    size = train.get("batch_size")
    return size if isinstance(size, int) and size > 0 else 1


def _spread(r: dict[str, Any]) -> tuple[float, float, int] | None:
    """(slowest, fastest, how many) of the trials behind the rate the table shows (a
    files workload's: its fresh passes), in batches/s; None where the report has none
    (hand-made, or written before the figures)."""
    if fresh_pass_rate(r) is not None:
        if not r.get("fresh_pass_s"):
            return None  # the digested pass alone: no spread
        passes = fresh_passes(r)
        if min(passes) <= 0:
            return None  # hand-made: no pass takes no time
        counted = fresh_pass_steps(r)  # after the warm-up steps timed apart
        return counted / max(passes), counted / min(passes), len(passes)
    sp, n = r.get("batches_per_s_spread"), r.get("trials")
    if not isinstance(sp, dict) or not _number(sp.get("min")) or not _number(sp.get("max")):
        return None
    if not isinstance(n, int) or isinstance(n, bool):
        return None  # how many trials the range spans is not said
    return float(sp["min"]), float(sp["max"]), n


def _change(
    old: dict[str, Any], new: dict[str, Any], sizes: tuple[int, int], max_slowdown: float
) -> tuple[str, bool]:
    """B against A, with the trials' spread considered: ``SLOWER 30%`` where every trial of
    B was slower than every trial of A and the medians differ by more than
    ``max_slowdown`` percent (the gate: True), ``slower 3%`` under it, ``faster 14%``,
    ``within spread`` where the trials' ranges overlap, ``? 2 trials`` where a report has
    fewer than :data:`MIN_TRIALS`; ``-`` without the figures. Of samples/s, as B/A
    (``sizes``: A's batch size and B's)."""
    a, b = _spread(old), _spread(new)
    if a is None or b is None or not _rate(old):
        return "-", False
    n = min(a[2], b[2])
    if n < MIN_TRIALS:
        return f"? {n} trial{'' if n == 1 else 's'}", False
    ratio = _rate(new) * sizes[1] / (_rate(old) * sizes[0])
    pct = f"{abs(1 - ratio) * 100:.0f}%" if abs(1 - ratio) >= 0.01 else f"{abs(1 - ratio):.1%}"
    if b[1] * sizes[1] < a[0] * sizes[0]:
        gate = (1 - ratio) * 100 > max_slowdown
        return f"{'SLOWER' if gate else 'slower'} {pct}", gate
    if b[0] * sizes[1] > a[1] * sizes[0]:
        return f"faster {pct}", False
    return "within spread", False


def _au_spread(r: dict[str, Any]) -> tuple[float, float, int] | None:
    """(lowest, highest, how many) of the trials' AU behind a result's ``au`` (its
    ``au_trials``); None without them (no compute, hand-made, or written before them)."""
    trials = r.get("au_trials")
    if r.get("au") is None or not isinstance(trials, list) or not trials:
        return None
    if not all(_number(v) for v in trials):
        return None
    return float(min(trials)), float(max(trials)), len(trials)


def _au_change(old: dict[str, Any], new: dict[str, Any], max_drop: float) -> tuple[str, bool]:
    """B's AU against A's, as :func:`_change` judges batches/s: ``LOWER 12`` (points of AU
    x 100) where every trial of B had a lower AU than every trial of A and the means differ
    by more than ``max_drop`` points (the gate: True), ``lower 2`` under it, ``higher 3``,
    ``within spread`` where the trials' ranges overlap, ``? 2 trials`` under
    :data:`MIN_TRIALS`; ``-`` without AU trials on both sides. Until 2026-12-07 compare
    gated batches/s alone: a storage change that took AU from 0.95 to 0.60 exited 0."""
    a, b = _au_spread(old), _au_spread(new)
    if a is None or b is None:
        return "-", False
    n = min(a[2], b[2])
    if n < MIN_TRIALS:
        return f"? {n} trial{'' if n == 1 else 's'}", False
    points = (float(new["au"]) - float(old["au"])) * 100
    if b[1] < a[0]:
        gate = -points > max_drop
        return f"{'LOWER' if gate else 'lower'} {-points:.1f}", gate
    if b[0] > a[1]:
        return f"higher {points:.1f}", False
    return "within spread", False


def compare(
    a_path: str,
    b_path: str,
    max_slowdown: float = MAX_SLOWDOWN,
    max_au_drop: float = MAX_AU_DROP,
) -> int:
    """Print B/A of each (workload, variant) of two reports, and whether B is slower or
    faster beyond the trials' spread, its AU lower or higher; 1 where a variant DIFFERS,
    FAILED in B, is SLOWER by more than ``max_slowdown`` percent, its AU LOWER by more than
    ``max_au_drop`` points (AU x 100), or nothing was compared (a CI gate), else 0."""
    a = load_report(a_path)
    b = load_report(b_path)
    defs_a, defs_b = _definitions(a), _definitions(b)
    other = {
        name: said
        for name in sorted(defs_a.keys() & defs_b.keys())
        if (said := _differences(defs_a[name], defs_b[name]))
    }
    for note in _notes(a, b, other):
        print(f"note: {note}")
    before = {(r["workload"], r["variant"]): r for r in a["results"]}
    extra = _extra_columns([*a["results"], *b["results"]])
    ta, tb = au_thresholds(a), au_thresholds(b)
    # As wide as their widest cell: an AU of more decimals ("0.899999* FAIL") moved the
    # columns right of it.
    extra = [
        (
            name,
            show,
            max([w, *(len(show(r, t)) for s, t in ((a, ta), (b, tb)) for r in s["results"])]),
        )
        for name, show, w in extra
    ]
    head = "".join(f" {name + ' A':>{w}s} {'B':>{w}s}" for name, _, w in extra)
    # As wide as the longest name: a swept variant (headrace?prefetch=0&block_mib=1) pushed
    # its row's figures right of the header's columns.
    both = [*a["results"], *b["results"]]
    ww = max([10, *(len(str(r["workload"])) for r in both)])
    vw = max([28, *(len(str(r["variant"])) for r in both)])
    # B against A beyond the trials' spread, where both reports have the trials' figures
    # (hand-made ones may not: no column).
    changes = {
        key: _change(
            before[key], r, (_batch(defs_a.get(key[0])), _batch(defs_b.get(key[0]))), max_slowdown
        )
        for r in b["results"]
        if (key := (r["workload"], r["variant"])) in before
    }
    cw = max([len(c) for c, _ in changes.values() if c != "-"], default=0)
    cw = cw and max(cw, len("change"))
    au_changes = {
        key: _au_change(before[key], r, max_au_drop)
        for r in b["results"]
        if (key := (r["workload"], r["variant"])) in before
    }
    aw = max([len(c) for c, _ in au_changes.values() if c != "-"], default=0)
    aw = aw and max(aw, len("AU change"))
    print(
        f"{'workload':{ww}s} {'variant':{vw}s} {'batches/s A':>12s} {'B':>12s} {'B/A':>7s}"
        + (f" {'change':{cw}s}" if cw else "")
        + f"{head}"
        + (f" {'AU change':{aw}s}" if aw else "")
        + "  digest"
    )
    differ = compared = 0
    slower: list[str] = []
    lower_au: list[str] = []
    failed_a, failed_b = _failed(a), _failed(b)
    for r in b["results"]:
        old = before.pop((r["workload"], r["variant"]), None)
        if old is None:
            was = "; failed in A (see its notes)" * ((r["workload"], r["variant"]) in failed_a)
            was = was or "; not measured in A (interrupted)" * bool(a.get("interrupted"))
            print(
                f"{r['workload']:{ww}s} {r['variant']:{vw}s} {'-':>12s} {_r(r):>12s}  only in B"
                + was
            )
            continue
        name = r["workload"]
        # Batches of another size: the ratio is of samples per second (the same ratio
        # where the batches agree).
        ratio = _ratio(_rate(r) * _batch(defs_b.get(name)), _rate(old) * _batch(defs_a.get(name)))
        same = "not compared (other data or plan: see above)" if name in other else _same(old, r)
        cells = "".join(f" {show(old, ta):>{w}s} {show(r, tb):>{w}s}" for _, show, w in extra)
        change, gate = changes[(name, r["variant"])]
        if gate:
            slower.append(f"{name}/{r['variant']} {ratio.strip()}")
        au_change, au_gate = au_changes[(name, r["variant"])]
        if au_gate:
            lower_au.append(f"{name}/{r['variant']} AU {old['au']:.2f} (A) -> {r['au']:.2f} (B)")
        print(
            f"{name:{ww}s} {r['variant']:{vw}s} {_r(old):>12s} {_r(r):>12s} {ratio}"
            + (f" {change:{cw}s}" if cw else "")
            + f"{cells}"
            + (f" {au_change:{aw}s}" if aw else "")
            + f"  {same}"
        )
        differ += same.startswith("DIFFERS")
        compared += 1
    broke = 0
    for (workload, variant), old in before.items():
        # A variant that failed in B was "only in A", exit 0: its run broke it.
        fails = (workload, variant) in failed_b
        # Left out of an interrupted B (not reached), it read as a variant dropped from
        # the run: said, as a failure is.
        lost = not fails and bool(b.get("interrupted"))
        print(
            f"{workload:{ww}s} {variant:{vw}s} {_r(old):>12s} {'-':>12s}  only in A"
            + "; FAILED in B (see its notes)" * fails
            + "; not measured in B (interrupted)" * lost
        )
        broke += fails
    if extra and extra[0][1] is _au:
        for line in _short_au_notes(a, b):
            print(line)
    if cw:
        print(_change_note(max_slowdown, [c for c, _ in changes.values()]))
    if aw:
        print(_au_change_note(max_au_drop, [c for c, _ in au_changes.values()]))
    if slower:
        # Exit 1: until 2026-12-07 compare exited 0 on any slowdown, and a CI gate read
        # it as a pass.
        print(
            f"headrace bench compare: {len(slower)} variant(s) slower in B than in A beyond "
            f"their trials' spread and by more than {max_slowdown:g}% (--max-slowdown): "
            + ", ".join(slower),
            file=sys.stderr,
        )
    if lower_au:
        print(
            f"headrace bench compare: {len(lower_au)} variant(s) kept a lower AU in B than "
            f"in A beyond their trials' spread and by more than {max_au_drop:g} points "
            "(AU x 100; --max-au-drop): " + ", ".join(lower_au),
            file=sys.stderr,
        )
    if broke:
        print(
            f"headrace bench compare: {broke} variant(s) failed in B that A measured (FAILED "
            "above); B's notes say why",
            file=sys.stderr,
        )
    if differ:
        # Exit 1, as a run whose variants disagree: a script that compares each run with a
        # baseline read 0, and a change of the bytes delivered passed as a speed-up.
        print(
            f"headrace bench compare: {differ} variant(s) delivered other bytes in B than in "
            "A (DIFFERS above), over the same data and plan",
            file=sys.stderr,
        )
    if not compared:
        # Reports of other variants or workloads (--variants naive against memcpy, a
        # workload renamed) printed "only in" rows, exit 0: a script that checks each run
        # against a baseline passed with no ratio.
        listed = {
            name: ", ".join(f"{r['workload']}/{r['variant']}" for r in s["results"][:4])
            + (f" and {len(s['results']) - 4} more" if len(s["results"]) > 4 else "")
            for name, s in (("A", a), ("B", b))
        }
        print(
            "headrace bench compare: no variant of a workload is in both reports (A: "
            f"{listed['A'] or 'no result'}; B: {listed['B'] or 'no result'}): nothing "
            "compared; compare runs of the same workloads and variants (-w, --variants)",
            file=sys.stderr,
        )
    return 1 if differ or broke or slower or lower_au or not compared else 0


def _change_note(max_slowdown: float, cells: list[str]) -> str:
    """What the change column says, under the rows."""
    note = (
        "change: B's median against A's; slower or faster only where every trial of one "
        "was slower than every trial of the other (each report's min-max), else within "
        f"spread; SLOWER (exit 1): by more than {max_slowdown:g}% (--max-slowdown)"
    )
    if any(c.startswith("?") for c in cells):
        note += (
            f"; ? N trials: under {MIN_TRIALS} in a report, too few to tell a change from "
            f"noise: run --trials {MIN_TRIALS} or more"
        )
    return note


def _au_change_note(max_au_drop: float, cells: list[str]) -> str:
    """What the AU change column says, under the rows."""
    note = (
        "AU change: B's AU against A's, in points (AU x 100); lower or higher only where "
        "every trial of one was below every trial of the other (au_trials), else within "
        f"spread; LOWER (exit 1): by more than {max_au_drop:g} points (--max-au-drop)"
    )
    if any(c.startswith("?") for c in cells):
        note += f"; ? N trials: under {MIN_TRIALS} in a report: run --trials {MIN_TRIALS} or more"
    return note


def _failed(report: dict[str, Any]) -> set[tuple[str, str]]:
    """(workload, variant) of each variant that failed in a report's run (left out of its
    results; its workload's ``failed``)."""
    return {
        (str(w.get("name")), str(f.get("variant")))
        for w in report.get("workloads") or []
        if isinstance(w, dict)
        for f in w.get("failed") or []
        if isinstance(f, dict)
    }


def _au(r: dict[str, Any], thresholds: dict[str, float]) -> str:
    au = r.get("au")
    if au is None:
        return "-"
    shown = au_text(au, r.get("au_pass"), thresholds.get(r["workload"]))
    # Marked as the bench table marks it: `--steps 1` is AU 0 by definition, and compare
    # printed it "0.00 FAIL" beside the other report's measured 0.78.
    return f"{shown}{'*' * short_au(r)} " + ("ok" if r.get("au_pass") else "FAIL")


def _short_au_notes(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The bench table's note under a starred AU, once for each length of trial, saying
    which report (A, B) has AU from such trials."""
    sides: dict[int, list[str]] = {}
    for side, report in (("A", a), ("B", b)):
        for steps in sorted({r["steps_per_trial"] for r in report["results"] if short_au(r)}):
            sides.setdefault(steps, []).append(side)
    return [f"{short_au_note(n)} ({', '.join(s)})" for n, s in sorted(sides.items())]


def _accelerators(r: dict[str, Any], _thresholds: dict[str, float]) -> str:
    return max_acc_text(r.get("max_accelerators"))


#: A column's cell of a result, given its report's AU thresholds by workload.
_Cell = Callable[[dict[str, Any], dict[str, float]], str]


def _extra_columns(results: list[dict[str, Any]]) -> list[tuple[str, _Cell, int]]:
    """AU and ``max acc.`` (``--accelerators auto``), A and B, where either report has
    them: what a run with compute answers ("how many accelerators does this storage keep
    busy?"), and compare showed batches/s alone."""
    out: list[tuple[str, _Cell, int]] = []
    if any(r.get("au") is not None for r in results):
        out.append(("AU", _au, 12))  # "0.8996* FAIL": more decimals by a threshold
    if any(r.get("max_accelerators") is not None for r in results):
        out.append(("max acc.", _accelerators, 10))
    return out


def _same(old: dict[str, Any], new: dict[str, Any]) -> str:
    """Whether two runs of a variant gave the same batches, as its report compared it."""
    if old["digest"] is None or new["digest"] is None:
        return "not digested"  # memcpy and the like: nothing to compare
    if old["digest"] == new["digest"]:
        return "same"
    if old.get("steps") != new.get("steps"):  # other runs of the same plan: not comparable
        return f"not compared ({old.get('steps')} vs {new.get('steps')} steps)"
    # A variant that hands samples over as fetches complete (iterable, ceiling) delivers
    # them in another order each run: its ordered digest differs from run to run.
    if "canonical" in (old.get("digest_compared"), new.get("digest_compared")):
        # A report written before canonical digests (or by hand) has none to compare:
        # two such were "same (canonical)" (None == None), one "DIFFERS (canonical)".
        lacking = [s for s, r in (("A", old), ("B", new)) if r.get("canonical_digest") is None]
        if lacking:
            return f"not compared (no canonical digest in {' and '.join(lacking)})"
        if old["canonical_digest"] == new["canonical_digest"]:
            return "same (canonical)"
        return "DIFFERS (canonical)"
    if any("digest_compared" in r and r["digest_compared"] is None for r in (old, new)):
        # digested, but order-free in a run that did not cover whole epochs (either run:
        # B's alone was said to differ from A's ordered digest)
        return "not compared (another order by design)"
    return "DIFFERS"


def _r(result: dict[str, Any]) -> str:
    return rate_text(_rate(result))


def _ratio(b: float, a: float) -> str:
    if not a:
        return f"{'-':>7s}"
    v = b / a
    return f"{v:6,.2f}x" if v == 0 or v >= 0.1 else f"{v:6.3g}x"
