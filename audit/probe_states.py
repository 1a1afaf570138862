"""Probe 5: states from a loader with other options are refused, naming what differs;
states round-tripped through JSON, pickle and torch.save resume exactly.

PYTHONPATH=src:audit python audit/probe_states.py
"""

from __future__ import annotations

import io
import json
import pickle
from itertools import islice
from typing import Any

import common
import numpy as np

from headrace.errors import HeadraceError, StateError
from headrace.formats import FileSource, PaddedRows, TableSource, TokenSource
from headrace.pipeline import Loader, Mixture
from headrace.transforms import RandomCrop

B = 8
r = common.build()


def tok(**kw: Any) -> Any:
    opts: dict[str, Any] = {"context": 16, "window_bytes": (20 * 16 + 1) * 4, "block_bytes": 4096}
    opts.update(kw)
    return TokenSource([r / "a.bin", r / "b.bin"], **opts)


def rows(**kw: Any) -> Any:
    opts: dict[str, Any] = {"context": 16, "ignore_index": -100}
    opts.update(kw)
    mask = opts.pop("mask", r / "r1.mask.npy")
    return PaddedRows(r / "r1.tok.npy", mask, **opts)


def tab(**kw: Any) -> Any:
    opts: dict[str, Any] = {"columns": ["id", "ids"], "width": 8, "window_rows": 50}
    opts.update(kw)
    return TableSource(str(opts.pop("path", r / "pq")), **opts)


def fs(**kw: Any) -> Any:
    opts: dict[str, Any] = {"format": "npz", "samples_per_file": 4, "decode_threads": 1}
    opts.update(kw)
    return FileSource(str(opts.pop("path", r / "npz")), **opts)


def mix(
    weights: Any = (0.5, 0.3, 0.2),
    names: Any = ("r1", "r2", "r3"),
    batch_size: int = B,
    r3: Any = None,
) -> Any:
    srcs = [
        common.rows(),
        common.rows(tag="r2"),
        r3 or common.rows("window", tag="r3", window_rows=13),
    ]
    return Mixture(dict(zip(names, srcs)), list(weights), batch_size=batch_size)


def transform_crop(arrays: dict[str, Any], samples: Any) -> dict[str, Any]:
    return arrays


# (label, base factory, other factory, loader kwargs base, loader kwargs other, part named)
CHANGES: list[tuple[str, Any, Any, dict[str, Any], dict[str, Any], str | None]] = [
    ("tokens context", tok, lambda: tok(context=15), {}, {}, "context"),
    (
        "tokens window_bytes",
        tok,
        lambda: tok(window_bytes=(21 * 16 + 1) * 4),
        {},
        {},
        "window_tokens",
    ),
    ("tokens shuffle", tok, lambda: tok(shuffle=False), {}, {}, "shuffle"),
    (
        "tokens files",
        tok,
        lambda: TokenSource(
            [r / "b.bin", r / "a.bin"], context=16, window_bytes=(20 * 16 + 1) * 4, block_bytes=4096
        ),
        {},
        {},
        "files",
    ),
    ("tokens positions=eos", tok, lambda: tok(positions="eos", eos_id=7), {}, {}, "positions"),
    ("batch size", tok, tok, {}, {"batch_size": 2 * B}, "batch size"),
    ("host_order", tok, tok, {}, {"host_order": "address"}, "host_order"),
    ("transform", tok, tok, {}, {"transform": transform_crop}, "transform"),
    ("rows mask/no mask", rows, lambda: rows(mask=None), {}, {}, "mask"),
    ("rows shuffle full->window", rows, lambda: rows(shuffle="window"), {}, {}, "shuffle"),
    (
        "rows window_rows",
        lambda: rows(shuffle="window", window_rows=37),
        lambda: rows(shuffle="window", window_rows=38),
        {},
        {},
        "window_rows",
    ),
    ("rows pad_side", rows, lambda: rows(pad_side="left"), {}, {}, "pad_side"),
    ("rows ignore_index", rows, lambda: rows(ignore_index=-1), {}, {}, "ignore_index"),
    ("rows dtype", rows, lambda: rows(dtype="int32"), {}, {}, "dtype"),
    ("table width", tab, lambda: tab(width=9), {}, {}, "widths"),
    ("table columns", tab, lambda: tab(columns=["ids", "id"]), {}, {}, "columns"),
    ("table shuffle", tab, lambda: tab(shuffle="full"), {}, {}, "shuffle"),
    ("table window_rows", tab, lambda: tab(window_rows=60), {}, {}, "window_rows"),
    ("table pq->hf", tab, lambda: tab(path=r / "hf"), {}, {}, "files"),
    ("files shuffle", fs, lambda: fs(shuffle="samples"), {}, {}, "shuffle"),
    ("files samples_per_file", fs, lambda: fs(samples_per_file=2), {}, {}, "samples_per_file"),
    (
        "files decode",
        lambda: fs(format="npy", samples_per_file=1, path=r / "npy"),
        lambda: fs(format="npy", samples_per_file=1, path=r / "npy", decode=False),
        {},
        {},
        "decode",
    ),
    ("mixture weights", mix, lambda: mix(weights=(0.4, 0.4, 0.2)), {}, {}, "weights"),
    ("mixture names", mix, lambda: mix(names=("a", "b", "c")), {}, {}, "sources"),
    (
        "mixture one source's shuffle",
        mix,
        lambda: mix(r3=common.rows("window", tag="r3", window_rows=14)),
        {},
        {},
        "sources.r3",
    ),
    ("mixture vs plain", mix, common.rows, {}, {}, "kind"),
]


def roundtrips(state: dict[str, Any]) -> dict[str, dict[str, Any]]:
    import torch

    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return {
        "json": json.loads(json.dumps(state)),
        "pickle": pickle.loads(pickle.dumps(state)),
        "torch.save": torch.load(buf),
        "torch.save weights_only": (buf.seek(0), torch.load(buf, weights_only=True))[1],
    }


def main() -> None:
    print("== refusals")
    for label, base, other, kw1, kw2, part in CHANGES:
        with Loader(
            base(),
            batch_size=kw1.get("batch_size", B),
            seed=1,
            **{k: v for k, v in kw1.items() if k != "batch_size"},
        ) as a:
            next(iter(a))
            st = a.state_dict()
        try:
            with Loader(
                other(),
                batch_size=kw2.get("batch_size", B) if "batch_size" in kw2 else B,
                seed=1,
                **{k: v for k, v in kw2.items() if k != "batch_size"},
            ) as b:
                b.load_state_dict(json.loads(json.dumps(st)))
                print(f"NOT REFUSED  {label}: state loaded (expected a StateError naming {part!r})")
        except StateError as exc:
            named = part is not None and part in str(exc)
            print(f"{'refused     ' if named else 'VAGUE       '} {label}: {str(exc)[-110:]}")
        except HeadraceError as exc:
            print(f"other error  {label}: {type(exc).__name__}: {exc}")
    print("== round trips")
    for label, make in (("tokens", tok), ("mixture", mix), ("npz", fs), ("table", tab)):
        with Loader(make(), batch_size=B, seed=2**63 - 1) as a:
            ref = [common.digest(x) for x in islice(a, 40)]
        with Loader(make(), batch_size=B, seed=2**63 - 1) as a:
            list(islice(a, 17))
            st = a.state_dict()
        for how, s in roundtrips(st).items():
            with Loader(make(), batch_size=B, seed=0) as b:
                b.load_state_dict(s)
                got = [common.digest(x) for x in islice(b, 23)]
            print(f"{'OK  ' if got == ref[17:] else 'FAIL'} {label} via {how}")
    print("== NumPy integers in Mixture / states")
    try:
        m = mix(batch_size=np.int64(B))
        with Loader(m, batch_size=B) as L:
            next(iter(L))
            json.dumps(L.state_dict())
        print("Mixture(batch_size=np.int64) ok")
    except Exception as exc:  # noqa: BLE001
        print(f"Mixture(batch_size=np.int64): {type(exc).__name__}: {exc}")
    with Loader(tok(), batch_size=B) as L:
        st = L.state_dict()
    st_np = {**st, "step": np.int64(5), "seed": np.uint64(3), "batch_size": np.int32(B)}
    with Loader(tok(), batch_size=B) as L:
        L.load_state_dict(st_np)
        print(
            "state with NumPy integer fields loads; re-saved JSON-able:",
            bool(json.dumps(L.state_dict())),
        )
    _ = RandomCrop


if __name__ == "__main__":
    main()
