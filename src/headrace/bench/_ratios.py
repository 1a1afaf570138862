"""Each result's ratios: "x base" over its workload's baseline and "x memcpy"."""

from __future__ import annotations

from typing import Any

__all__ = ["ratios"]


def _swept(r: dict[str, Any], key: str | None) -> str | None:
    """The value of ``--sweep KEY=...`` in a result's variant spec (None without a sweep)."""
    if key is None:
        return None
    query = r["variant"].partition("?")[2]
    return dict(p.split("=", 1) for p in query.split("&") if "=" in p).get(key)


def _named(
    same: dict[str, Any] | None, r: dict[str, Any], peers: list[dict[str, Any]], name: str
) -> dict[str, Any] | None:
    """``same`` (the variant ``name`` with the options of ``r``) if it is among ``peers``
    and is not ``r`` itself, else the first of ``peers`` called ``name`` whatever its
    options: ``r`` is its own reference only where it is that first one."""
    if same is not None and same is not r and any(x is same for x in peers):
        return same
    return next((x for x in peers if x["variant"].partition("?")[0] == name), None)


def ratios(results: list[dict[str, Any]], sweep_key: str | None = None) -> None:
    """Each result over its baseline (``naive``, else the first variant) and ``memcpy``,
    among the results at its value of ``--sweep KEY=...`` (``sweep_key``; all results
    without a sweep): ``naive?block_mib=1`` for ``headrace-sync?prefetch=0&block_mib=1``.
    A variant of the same options (``naive?block_mib=1`` for ``headrace?block_mib=1``)
    is taken first, but never a result for itself: ``naive?seed=6`` is over the first
    ``naive`` (``naive?seed=5``), as the other variants are.

    Matching the variant's whole options alone set ``headrace-sync?prefetch=0&block_mib=1``
    over itself under ``--sweep block_mib=1,4`` (1.00x, and no x memcpy), and
    ``--variants map-style,headrace?in_flight=8`` showed headrace at 1.00x map-style;
    until 2026-12-06 ``--variants naive?seed=5,naive?seed=6`` showed each at 1.00x, over
    itself."""
    by = {r["variant"]: r for r in results}
    for r in results:
        _, sep, options = r["variant"].partition("?")
        suffix = sep + options
        value = _swept(r, sweep_key)
        peers = [x for x in results if _swept(x, sweep_key) == value]
        base = _named(by.get("naive" + suffix), r, peers, "naive") or peers[0]
        memcpy = _named(by.get("memcpy" + suffix), r, peers, "memcpy")
        # Files kinds: the fresh pass is the figure (a trial's first batches can come
        # from a read-ahead queue filled while other variants ran).
        key = "samples_per_s" if base.get("samples_per_s") else "batches_per_s"
        r["baseline_variant"] = base["variant"]
        r["ratio_to_baseline"] = _over(r[key], base[key])
        r["ratio_to_memcpy"] = (
            _over(r["batches_per_s"], memcpy["batches_per_s"]) if memcpy else None
        )


def _over(figure: float, reference: float) -> float | None:
    """``figure`` over ``reference``; ``None`` (the table's "-") over one of no throughput,
    which ended the run in ZeroDivisionError after every variant was measured."""
    return figure / reference if reference else None
