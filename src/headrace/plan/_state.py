"""The loader's checkpoint: tiny, versioned, and refused on the wrong data."""

from __future__ import annotations

import hashlib
import json
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from headrace.errors import StateError
from headrace.plan._changes import (
    NAMED_PARTS,
    changes,
    formats_only,
    json_value,
    named_parts,
    plain,
)

__all__ = [
    "PLAN_VERSION",
    "STEP_LIMIT",
    "LoaderState",
    "array_state",
    "fingerprint_digest",
    "fingerprint_parts",
    "legacy_digest",
    "legacy_digests",
]

#: 2: keys of counters of 2**32 or more no longer alias smaller ones (``derive_keys``);
#: a version-1 state with a seed below 2**32 plans the same batches and still loads.
PLAN_VERSION = 2
#: The version a state with an ``origin`` (a resume with another global batch size) is
#: saved as: the same plan, but a headrace from before origins ignores the key and would
#: read on at ``step * batch_size``, other samples, silently; it refuses a version it
#: does not know. A state without an origin stays :data:`PLAN_VERSION`.
ORIGIN_VERSION = 3
#: A state's step is below this: 2**53, past which JSON readers that hold numbers as
#: doubles (JavaScript's, jq's) no longer keep every integer exact. A loader reads no
#: step whose state, the step after it, would reach it (the last it reads is 2**53 - 2).
STEP_LIMIT = 2**53


def fingerprint_digest(fingerprint: dict[str, Any]) -> str:
    """A short stable digest of a source's fingerprint (paths, sizes, dtypes, config)."""
    blob = json.dumps(fingerprint, sort_keys=True, separators=(",", ":"), default=json_value)
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


#: Parts added to descriptions after states were saved without them, oldest first:
#: ``order``, a mixture's source order (the digest sorts the keys of its ``sources``);
#: ``paths``, the paths of a token or table source's files that share a base name
#: (also inside a mixture's sources).
_LATER_PARTS = ("order", "paths")


_STATE_KEYS = ("seed", "step", "batch_size", "fingerprint", "version")


def _state_inside(d: Mapping[Any, Any], depth: int = 3) -> str | None:
    """Where in ``d`` (a whole checkpoint, say) a loader state lies, as the subscripts that
    reach it (``['data']``); ``None`` if none does within ``depth`` levels."""
    for k, v in d.items():
        if isinstance(v, Mapping):
            if all(key in v for key in _STATE_KEYS):
                return f"[{k!r}]"
            deeper = _state_inside(v, depth - 1) if depth > 1 else None
            if deeper is not None:
                return f"[{k!r}]{deeper}"
    return None


def _without(value: Any, keys: tuple[str, ...]) -> Any:
    if not isinstance(value, dict):
        return value
    return {k: _without(v, keys) for k, v in value.items() if k not in keys}


def legacy_digests(fingerprint: dict[str, Any]) -> tuple[str, ...]:
    """The digests of ``fingerprint`` as states saved before each of its later parts
    have it, newest first (empty if it has none): such a state loads as it did then,
    unchecked for the parts added since."""
    out: list[str] = []
    for i in reversed(range(len(_LATER_PARTS))):
        older = _without(fingerprint, _LATER_PARTS[i:])
        digest = fingerprint_digest(older)
        if older != fingerprint and digest not in out:
            out.append(digest)
    return tuple(out)


def legacy_digest(fingerprint: dict[str, Any]) -> str | None:
    """The digest of ``fingerprint`` as states saved before all its later parts have it
    (``None`` if it has none); :func:`legacy_digests` gives every older one."""
    older = legacy_digests(fingerprint)
    return older[-1] if older else None


def fingerprint_parts(fingerprint: dict[str, Any]) -> dict[str, str]:
    """A 12-hex digest of each part of a fingerprint (each top-level key, and each key of
    a top-level mapping, as ``sources.chat``), so a refused state can say what changed;
    and its settings and files, named (:func:`~headrace.plan._changes.named_parts`), so
    it can say which changed and how."""
    fingerprint = plain(fingerprint)  # NumPy numbers and paths as JSON holds them
    out: dict[str, str] = named_parts(fingerprint)
    for key, value in fingerprint.items():
        if isinstance(value, dict) and value:
            for sub, v in value.items():
                out[f"{key}.{sub}"] = fingerprint_digest({"": v})[:12]
        else:
            out[key] = fingerprint_digest({"": value})[:12]
    return out


#: The way on where the saved run can go on exactly with another description: the saved
#: state itself (seed, step, origin) under the loader's own fingerprint. Until 2026-12-04
#: the PNG refusal said "this loader's own state_dict() with 'step' set", which drops an
#: origin: a state saved after a change of batch size went on at step * batch_size.
_KEPT = (
    "{**saved, 'fingerprint': own['fingerprint'], 'parts': own['parts']} with own = "
    "loader.state_dict() (it keeps the saved seed, step and any change of batch size)"
)


def _mixed_way_on(
    differ: list[str], step: int, saved: Mapping[str, str], now: Mapping[str, str]
) -> str:
    """How a mixture goes on from ``step`` when sources were dropped, added, or one's
    files or settings changed (else ``""``). A source's id, its place in the order, keys
    its shuffle and the weights' split tree: dropped from the middle, the sources after
    it read in another order; kept with a weight of 0 from ``step`` (a schedule), none
    is disturbed. Added last with a weight of 0 before ``step``, the others keep their
    orders, and their counts at ``step`` are another tree's (within a few samples)."""
    was = {k.removeprefix("sources.") for k in saved if k.startswith("sources.")}
    is_ = {k.removeprefix("sources.") for k in now if k.startswith("sources.")}
    if not was or not is_:
        # A mixture's state into a loader of no mixture (or the reverse): no schedule
        # of either can go on from the other. Until 2026-12-07 it advised one giving
        # every saved source a weight of 0, which no Mixture takes.
        return ""
    gone, new = sorted(was - is_), sorted(is_ - was)
    changed = [k.removeprefix("sources.") for k in differ if k.startswith("sources.")]
    changed = [n for n in changed if n in was and n in is_]
    if changed and not gone and not new and set(differ) == {f"sources.{n}" for n in changed}:
        them = ", ".join(repr(n) for n in changed)
        one = len(changed) == 1
        return (
            f"to go on with this data at step {step}, load this loader's own state_dict() "
            f"with 'step' set to {step}: source{'' if one else 's'} {them} "
            f"go{'es' if one else ''} on in {'its' if one else 'their'} new data's order "
            "(the epoch in progress is shuffled anew, so some of its samples repeat and "
            "some are skipped); the other sources go on exactly (the same samples at the "
            'same steps) (docs/long-runs.md, "Restarts with changes")'
        )
    if gone and len(gone) == len(new) and not changed and "weights" not in differ:
        then, now_ = _mixed_order(saved), _mixed_order(now)
        moved = {a: b for a, b in zip(then, now_, strict=False) if a != b}
        if (
            len(then) == len(now_)
            and set(moved) == set(gone)
            and set(moved.values()) == set(new)
            and all(saved[f"sources.{a}"] == now[f"sources.{b}"] for a, b in moved.items())
        ):
            renamed = ", ".join(f"{a!r} as {b!r}" for a, b in moved.items())
            return (
                f"the sources are the saved ones renamed ({renamed}), each in its place (its id, "
                f"which keys its shuffle): go on exactly at step {step} by loading the saved "
                f"state with this loader's own fingerprint and parts in it: {_KEPT}"
            )
    if gone and not new and not changed:
        them = ", ".join(repr(n) for n in gone)
        zeros = ", ".join(f"{n!r}: 0" for n in gone)
        return (
            f"to drop {them} at step {step} with every other source going on from the "
            "sample it had reached (none skipped or read twice), keep the sources as saved "
            "(in their order, with the saved weights; a source whose files are gone may be "
            "any source of its layout in its place, a small file: weighted 0, it is never "
            f"read) and give the Mixture schedule={{{step}: "
            f"{{{zeros}, and the others' new weights}}}}, a weight 0 from then, and load that "
            f"loader's own state_dict() with 'step' set to {step} (docs/long-runs.md, "
            '"A curriculum"); loaded into this loader at that step instead, each source would '
            "go on where these weights would have brought it, skipping or repeating samples, "
            "and any source after the dropped one would read in another order (its place "
            "in the order keys its shuffle)"
        )
    if new and not gone and not changed:
        them = ", ".join(repr(n) for n in new)
        return (
            f"to add {them} at step {step} with the saved sources going on in their own "
            "orders, each from within a few samples of the one it had reached, put the new "
            "source last (a source's place in the order keys its shuffle), with weight 0 "
            f"beside the saved weights and schedule={{{step}: new_weights}}, and load that "
            f"loader's own state_dict() with 'step' set to {step} (docs/long-runs.md, "
            '"A curriculum"; a source more splits the weights another way, so a source\'s '
            "count at the step may differ by a sample or two); loaded into this loader at "
            "that step instead, each source would go on where these weights would have "
            "brought it, skipping or repeating samples"
        )
    return ""


def _mixed_order(parts: Mapping[str, str]) -> list[str]:
    """A mixture's source names in order, from its named weights (``[]``: not named)."""
    try:
        settings = json.loads(parts["settings:named"])
    except (KeyError, ValueError, TypeError):
        return []
    if not isinstance(settings, dict):
        return []
    return [k.removeprefix("weights.") for k in settings if k.startswith("weights.")]


def _way_on(
    differ: list[str],
    step: int,
    saved: Mapping[str, str] | None = None,
    now: Mapping[str, str] | None = None,
) -> str:
    """How to go on from ``step`` when the parts ``differ`` (a refusal's last words);
    ``saved``, ``now``: both sides' parts, where known (a mixture's sources, named)."""
    reread = [] if saved is None or now is None else formats_only(saved, now)
    # The parts holding those files (a mixed source's, "NAME of source 'web'"), and no
    # other, differ: a setting past those a state names would show here.
    holders = {n.partition(" of source ")[2].strip("'") for n in reread}
    if reread and set(differ) == {f"sources.{h}" if h else "files" for h in holders}:
        # A Megatron .bin copied without its .idx (then opened with dtype=), or a nanoGPT
        # file given dtype=: the same tokens, the same plan. Until 2026-12-07 the way on
        # shuffled the epoch in progress anew, repeating and skipping samples.
        return (
            f"{', '.join(reread)} {'is' if len(reread) == 1 else 'are'} the same tokens "
            "opened as another format, so this run reads the saved run's samples: go on "
            f"exactly at step {step} by loading the saved state with this loader's own "
            "fingerprint and parts in it: "
            f"{_KEPT}; or open the files as the saved run did (a Megatron .bin with its "
            ".idx beside it, a nanoGPT train.bin without dtype=)"
        )
    if saved is not None and now is not None and any(k.startswith("sources.") for k in differ):
        mixed = _mixed_way_on(differ, step, saved, now)
        if mixed:
            return mixed
    if differ == ["weights"] and step == 0:
        # A schedule cannot switch at step 0 (switches come at steps > 0), and needs not:
        # no sample was read with the saved weights.
        return (
            "the state is at step 0, before any sample was read with the saved weights, so "
            "nothing is skipped or read twice if these weights start from there: load this "
            "loader's own state_dict() with 'step' set to 0, or load none"
        )
    if differ == ["weights"]:
        return (
            "to go on with these weights from this step, each source from the sample it had "
            "reached (none skipped or read twice), make the Mixture with the saved weights "
            f"and schedule={{{step}: new_weights}}, and load that loader's own state_dict() "
            f"with 'step' set to {step} (docs/long-runs.md, \"A curriculum\"); loaded into "
            "this loader at that step instead, each source would go on where these weights "
            "would have brought it, skipping or repeating samples"
        )
    if differ == ["schedule"]:
        return (
            f"to go on with this schedule, if its switches come at step {step} or later, "
            f"load this loader's own state_dict() with 'step' set to {step}: the steps "
            "before its first switch are the saved run's, so it goes on exactly "
            f'(docs/long-runs.md, "A curriculum"); after a switch before step {step}, the '
            "sources would go on where it would have brought them, skipping or repeating "
            "samples"
        )
    if differ == ["png16"]:
        # PNG16_PART (formats): the pixels of some PNGs changed, not the files nor the plan.
        return (
            "the one difference is that this headrace decodes 16-bit RGB, RGBA and grey + "
            "alpha PNGs to uint16, every bit (since 2026-12-02), where the state may have "
            "been saved by one that read their high bytes as uint8; the order of samples is "
            "the same. If no PNG here is 16-bit colour or grey + alpha, or to go on with "
            "the new pixels, load the saved state with this loader's own fingerprint and "
            f"parts in it: {_KEPT}; for the old pixels, make the source with "
            "image_mode='RGB' (or 'RGBA', 'LA') and load the saved state with that "
            'loader\'s own fingerprint and parts in it (docs/files.md, "16-bit PNGs")'
        )
    if differ == ["host_order"]:
        # Until 2026-12-04 this fell through to the general way on below, which said that
        # samples would repeat and be skipped: not so, each step's samples are the same set.
        return (
            "the one difference is host_order: 'plan' and 'address' read the same samples at "
            "every step (each host another share of them), so this run can go on at step "
            f"{step} skipping and repeating nothing: load the saved state with this loader's "
            f"own fingerprint and parts in it: {_KEPT}; from then on each host's rows are "
            'another share of each step (docs/tokens.md, "Hosts on shared storage")'
        )
    return (
        f"to go on with this data at step {step} (in this data's order: the epoch in "
        "progress is shuffled anew, so some samples repeat and some are skipped), load this "
        f"loader's own state_dict() with 'step' set to {step} (docs/long-runs.md, "
        '"Restarts with changes")'
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class LoaderState:
    """Everything needed to resume: O(1) in the run's length.

    ``parts`` (:func:`fingerprint_parts`; absent from states saved before it
    existed) names what differs when a state is refused. ``version``: the plan
    version the state was saved with (1 or :data:`PLAN_VERSION`).

    ``origin`` ``(step0, sample0)``: the step from which ``batch_size`` holds and
    the samples the run had read before it, set by a resume with another global
    batch size (``None``: ``(0, 0)``, a run of one batch size; absent from its
    dict). Step ``t`` reads samples ``sample0 + (t - step0) * batch_size + [0, B)``.

    ``epochs``: the exact pass (``Loader(..., epochs=k)``) that saved it; ``None`` (absent
    from its dict, as states were before it) for a training run's. Over the same files the
    two have the same fingerprint, and one's step means nothing to the other.
    """

    seed: int
    step: int
    batch_size: int
    fingerprint: str
    version: int = PLAN_VERSION
    parts: dict[str, str] | None = None
    origin: tuple[int, int] | None = None
    epochs: int | None = None

    def to_dict(self) -> dict[str, Any]:
        # Not dataclasses.asdict, which deep-copies every leaf: 10 us a part, and a state
        # names up to 32 files (StatefulDataLoader asks each worker for it every batch).
        out: dict[str, Any] = {
            "seed": self.seed,
            "step": self.step,
            "batch_size": self.batch_size,
            "fingerprint": self.fingerprint,
            "version": self.version,
            "parts": None if self.parts is None else dict(self.parts),
            "origin": self.origin,
        }
        if self.origin is None:
            del out["origin"]  # as states were before origins: same dict, same digests
        else:
            out["origin"] = {"step": self.origin[0], "sample": self.origin[1]}
            out["version"] = ORIGIN_VERSION
        if self.epochs is not None:  # (a training run's dict is as it was)
            out["epochs"] = self.epochs
        return out

    @property
    def consumed(self) -> int:
        """Samples of the global stream the run had read before ``step`` (Megatron's
        ``consumed_samples``)."""
        step0, sample0 = self.origin or (0, 0)
        return sample0 + (self.step - step0) * self.batch_size

    def origin_for(self, batch_size: int) -> tuple[int, int] | None:
        """The origin a loader of global batch ``batch_size`` resumes this state with:
        the state's own for the same batch size, else ``(step, consumed)``, so its
        first step reads on from the first sample this run had not read."""
        if batch_size == self.batch_size:
            return self.origin
        if self.consumed >= 2**63:
            raise StateError(
                f"loader state at step {self.step} with global batch size {self.batch_size} "
                f"counts {self.consumed} samples read, past the int64 sample numbers "
                f"(below 2**63) a run can read; it cannot go on with batch size {batch_size}"
            )
        return _origin(self.step, self.consumed)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LoaderState:
        if not isinstance(d, Mapping):
            raise StateError(
                f"not a headrace loader state: a {type(d).__name__} ({d!r:.200}); expected "
                "the dict that state_dict() returned (json.loads it if it was saved as text)"
            )
        missing = [k for k in _STATE_KEYS if k not in d]
        if missing:
            keys: set[object] = set(d)  # (typed as str; msgpack gives bytes)
            as_bytes = [k for k in missing if k.encode() in keys]
            inside = _state_inside(d)
            hint = (
                f"; its keys are bytes ({as_bytes[0].encode()!r}), as msgpack.unpackb(raw=True) "
                "gives them: unpack with raw=False (msgpack's default since 1.0)"
                if as_bytes
                # Its workers' states name each worker's step, not the consumer's: the one
                # under 'dataset_state' (no workers) is right, the hint below is not.
                else "; it is a torchdata StatefulDataLoader's state_dict(): "
                "headrace.torch.from_stateful_dataloader(state) gives the headrace state "
                "at the step its consumer reached"
                if "_snapshot" in keys or "fetcher_state" in keys
                else f"; a loader state lies under {inside} (a whole checkpoint?): pass that one"
                if inside
                else ""
            )
            raise StateError(
                f"not a headrace loader state: it has no {', '.join(map(repr, missing))} "
                f"(keys: {sorted(map(str, d))}){hint}"
            )
        try:
            version = _whole(d["version"], "version")
            if version not in (1, PLAN_VERSION, ORIGIN_VERSION):
                raise StateError(
                    f"loader state has plan version {version}; this headrace plans with "
                    f"version {PLAN_VERSION} and reads states of versions 1 to "
                    f"{ORIGIN_VERSION}, so it cannot replay it. Resume it with the headrace "
                    "that saved it; to go on here in this version's order instead, load this "
                    f"loader's own state_dict() with 'step' set to {d['step']!s:.40}"
                )
            origin = _item(d.get("origin"))
            if (version == ORIGIN_VERSION) != (origin is not None):
                raise StateError(
                    f"loader state has plan version {version} and "
                    f"{'no' if origin is None else 'an'} origin: version "
                    f"{ORIGIN_VERSION} is a state with one (a resume with another batch size), "
                    "and only it"
                )
            if version == ORIGIN_VERSION:
                version = PLAN_VERSION  # the same plan: the origin says the rest
            st = cls(
                seed=_whole(d["seed"], "seed"),
                step=_whole(d["step"], "step"),
                batch_size=_whole(d["batch_size"], "batch_size"),
                fingerprint=_text(d["fingerprint"], "fingerprint"),
                # As saved: a version-1 state replays under version 2 only where no
                # counter reached 2**32, which check() can tell for mixtures (see there).
                version=version,
                parts=_parts(d.get("parts")),
                origin=_origin_of(origin),
                epochs=None if _item(d.get("epochs")) is None else _whole(d["epochs"], "epochs"),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise StateError(f"not a headrace loader state: {d!r} ({exc})") from exc
        if st.epochs is not None and st.epochs < 1:
            raise StateError(f"loader state has epochs {st.epochs}; expected an integer >= 1")
        if not 0 <= st.seed < 2**63 or not 0 <= st.step < STEP_LIMIT or st.batch_size < 1:
            raise StateError(
                f"loader state out of range: seed {st.seed} (expected [0, 2**63)), step "
                f"{st.step} (expected [0, 2**53)), batch size {st.batch_size} (expected >= 1)"
            )
        if st.origin is not None:
            step0, sample0 = st.origin
            if not 0 <= step0 <= st.step or not 0 <= sample0 or st.consumed >= 2**63:
                raise StateError(
                    f"loader state out of range: origin step {step0}, sample {sample0} "
                    f"(expected step in [0, step {st.step}], sample >= 0, and sample + "
                    f"(step - origin step) * batch size {st.batch_size} below 2**63)"
                )
        if version == 1 and st.seed >= 2**32:
            raise StateError(
                f"loader state has plan version 1 and seed {st.seed}: version 1 shuffled a "
                "seed of 2**32 or more like a smaller one (seeds 2**32 apart replayed each "
                f"other's epochs); this headrace plans with version {PLAN_VERSION}, whose "
                "order for that seed differs: it cannot replay it"
            )
        return st

    def check(
        self,
        *,
        fingerprint: str,
        batch_size: int,
        parts: dict[str, str] | None = None,
        legacy: str | tuple[str, ...] | None = None,
        mixture: bool = False,
        epochs: int | None = None,
    ) -> None:
        """Refuse a state saved on other data; with both sides' ``parts``, name the
        parts of the sources' description that differ. ``legacy``: the digest(s) the
        same data had before parts were added to its description
        (:func:`legacy_digests`); a state saved then still loads. ``mixture``: the
        sources are a :class:`~headrace.pipeline.Mixture`, whose version-1 states
        cannot be replayed, and which cannot go on with another global batch size
        (refused); nor can an exact pass (``epochs``). Any other loader resumes with
        another batch size at the first sample the run had not read
        (:meth:`origin_for`). ``epochs``: the loader's exact pass, which only its own
        states resume (:meth:`_check_pass`): checked after other data (what the data is
        comes first), before another batch size (whose fix it would then refuse)."""
        if mixture and batch_size != self.batch_size and not self._differs(parts, "batch_size"):
            # First: a mixture's description holds its batch size, whose change would
            # otherwise be told as other data. Only where nothing else differs: refused
            # for its batch size alone, the fix it gave was then refused for the data.
            self._check_pass(epochs)
            self._check_fixed_batch(batch_size, mixture=mixture, epochs=epochs)
        older = (legacy,) if isinstance(legacy, str) else legacy or ()
        if fingerprint != self.fingerprint and self.fingerprint not in older:
            which = told = ""  # what differs; what changed, named
            if parts is not None and self.parts is not None:
                saved = self.parts
                keys = sorted(
                    k
                    for k in parts.keys() | saved.keys()
                    if parts.get(k) != saved.get(k)
                    # a part the state was saved without, when it did not exist yet
                    and not (k in _LATER_PARTS and k not in saved)
                    and k not in NAMED_PARTS  # (told below, by name)
                )
                which = f"; what differs: {', '.join(keys)}" if keys else ""
                told = changes(saved, parts)
            else:
                keys = []
            way = _way_on(keys, self.step, self.parts, parts)
            raise StateError(
                f"loader state was saved on different data (fingerprint {self.fingerprint}, "
                f"this loader's sources have {fingerprint}{which}){': ' if told else ''}"
                f"{told}. Same files, sizes, dtypes, sampling config and host order are "
                f"required to resume: give the run the data it was saved with; or, {way}"
            )
        self._check_pass(epochs)
        if mixture or epochs is not None:
            self._check_fixed_batch(batch_size, mixture=mixture, epochs=epochs)
        if mixture and self.version == 1:
            # Each mixed source reads with a seed derived from (seed, source), of 63 bits:
            # version 1 keyed counters of 2**32 or more in the encoding version 2 replaced,
            # so every source's shuffle differs, whatever the loader's seed. Loaded, such a
            # state went on with other samples of every source than the run it was saved
            # from.
            raise StateError(
                f"loader state has plan version 1 and its sources are a mixture: version 1 "
                f"shuffled each mixed source by a derived seed of 2**32 or more, which this "
                f"headrace (plan version {PLAN_VERSION}) keys differently, so it cannot replay "
                "it. To finish that run, resume it with the headrace that saved it; to go on "
                "here with this version's order, load this loader's own state_dict() with "
                f"'step' set to {self.step} (each source's current epoch is then shuffled "
                "anew: some of its samples repeat, some are skipped)"
            )

    def _check_pass(self, epochs: int | None) -> None:
        """Refuse a training run's state in an exact pass (``epochs``), and the other way
        round: over the same files both have the same fingerprint, but a training step
        is no step of the pass (loaded, the pass began there and left out the samples
        before it), and a pass's step no point of a training run."""
        if epochs == self.epochs:
            return
        if self.epochs is None:
            raise StateError(
                f"loader state is a training run's (saved by a loader without epochs=, at "
                f"step {self.step}), and this loader is an exact pass (epochs={epochs}): "
                "its step counts the training run's batches, not this pass's, and the pass "
                "would leave out every sample before it. Load it into the training loader it "
                "came from; an evaluation loader needs no state (each iteration is the whole "
                "pass), or its own state_dict(), saved during the pass (states an exact "
                "pass saved before 2026-12-07 name no pass either: start that pass over)"
            )
        if epochs is None:
            raise StateError(
                f"loader state is an exact pass's (epochs={self.epochs}, at step "
                f"{self.step}), and this loader is a training loader (no epochs=): load it "
                f"into the evaluation loader it came from, Loader(..., epochs={self.epochs}) "
                "(or TorchDataset(..., epochs=)); a training loader resumes from its own "
                "state_dict()"
            )
        raise StateError(
            f"loader state is an exact pass of epochs={self.epochs} (at step {self.step}), "
            f"and this loader's is epochs={epochs}, which marks other rows valid and ends "
            f"at another step: load it into a loader with epochs={self.epochs}, or start "
            "this pass without a state"
        )

    def _differs(self, parts: dict[str, str] | None, but: str) -> bool:
        """Whether a part of the description other than ``but`` differs between this
        state's ``parts`` and ``parts``; ``False`` where either side has none to tell."""
        if parts is None or self.parts is None:
            return False
        saved = self.parts
        return any(
            parts.get(k) != saved.get(k)
            for k in parts.keys() | saved.keys()
            if k != but and k not in NAMED_PARTS and not (k in _LATER_PARTS and k not in saved)
        )

    def _check_fixed_batch(self, batch_size: int, *, mixture: bool, epochs: int | None) -> None:
        """Refuse another global batch size (or a state made by a change of it) for a
        loader that plans by step, not by sample: a mixture, an exact pass."""
        if batch_size == self.batch_size and self.origin is None:
            return
        if mixture:
            why = (
                "its sources are a Mixture, which deals out each step of its own "
                "batch_size among its sources (per-step counts and order, and a schedule "
                "by step), so its sample stream depends on the batch size"
            )
        else:
            why = (
                f"it is an exact pass (epochs={epochs}), which ends at the step that "
                "completes its epochs and marks its rows by step and batch size"
            )
        if batch_size != self.batch_size:
            found = (
                f"loader state was saved with global batch size {self.batch_size}, this "
                f"loader has {batch_size}"
            )
            fix = f"resume it with batch_size={self.batch_size} (the host count may change)"
        else:
            assert self.origin is not None  # (returned above otherwise)
            found = (
                f"loader state comes from a change of global batch size at step "
                f"{self.origin[0]} (after {self.origin[1]} samples)"
            )
            fix = "resume it with a loader of plain sources and steps=, or start anew"
        raise StateError(f"{found}; this loader cannot change it: {why}. To go on, {fix}")


def array_state(state: Mapping[str, Any]) -> dict[str, Any]:
    """``state`` (a ``state_dict()``) with its strings as 1-D ``uint8`` arrays of their
    ASCII bytes, for checkpointers that keep only arrays and numbers in a pytree: orbax's
    ``StandardSave`` refuses ``str`` leaves. Every ``load_state_dict`` takes the result,
    or what such a checkpointer restores of it (NumPy or jax arrays), as it is.
    A state made by a change of batch size keeps its ``origin`` (two ints): restored
    onto a target tree, the target must have it too (restore without a target, or
    make the target of the saved state, not of a fresh loader's)."""
    st = LoaderState.from_dict(state)
    out = st.to_dict()
    out["fingerprint"] = _ascii(st.fingerprint)
    if st.parts is None:
        del out["parts"]  # an array tree has no None leaf to keep
    else:
        out["parts"] = {k: _ascii(v) for k, v in st.parts.items()}
    return out


def _ascii(text: str) -> np.ndarray[Any, np.dtype[np.uint8]]:
    return np.frombuffer(text.encode("ascii"), dtype=np.uint8).copy()


def _item(value: Any) -> Any:
    """What a 0-d NumPy array of a string or an object holds: ``np.load`` of a state saved
    with ``np.savez(**state)`` gives its strings, its ``parts`` and ``origin`` (dicts) and a
    ``None`` so (its ints as 0-d int64 arrays, which :func:`_whole` takes)."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "UO":
        return value.item()
    return value


def _text(value: Any, name: str) -> str:
    """A string field of a state: a ``str``, or the ``uint8`` array :func:`array_state`
    made of one (restored by an array checkpointer as a NumPy, jax or torch array)."""
    value = _item(value)
    if isinstance(value, str):
        return str(value)  # not an np.str_, which torch.load(weights_only=True) refuses
    dtype = getattr(value, "dtype", None)
    # torch's uint8 (a tree_map(torch.as_tensor) of it) names itself "torch.uint8".
    if str(dtype) in ("uint8", "torch.uint8") and getattr(value, "ndim", 0) == 1:
        raw = np.asarray(value).tobytes()
        if raw.isascii() and raw.decode("ascii").isprintable():
            return raw.decode("ascii")
    raise StateError(
        f"loader state has {name} {value!r:.200}; expected a string, or the 1-D uint8 "
        "array of its ASCII bytes that array_state() makes of one"
    )


def _parts(value: Any) -> dict[str, str] | None:
    value = _item(value)
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise StateError(f"loader state has parts {value!r}; expected a dict of str to str")
    return {str(k): _text(v, f"parts[{k!r}]") for k, v in value.items()}


def _origin(step: int, sample: int) -> tuple[int, int] | None:
    """``(step, sample)``, or ``None`` for ``(0, 0)``: a batch size from the start."""
    return None if step == sample == 0 else (step, sample)


def _origin_of(value: Any) -> tuple[int, int] | None:
    """A state's ``origin``: absent, or ``{"step": int, "sample": int}``."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) != {"step", "sample"}:
        raise StateError(
            f"loader state has origin {value!r:.200}; expected a dict of 'step' and "
            "'sample' (the step at which the global batch size changed and the samples "
            "read before it), or none"
        )
    return _origin(_whole(value["step"], "origin step"), _whole(value["sample"], "origin sample"))


def _whole(value: Any, name: str) -> int:
    """An integer field of a state (Python or NumPy integers, or a 0-d integer array; a
    float or string is refused, so a step of 3.9 is not silently read as 3)."""
    # Pytree checkpoints (orbax, flax, a tree_map to arrays) give the ints back as 0-d
    # NumPy or jax arrays, whose __index__ takes them and refuses floats; torch's also
    # takes a bool or one-element tensor, so those are refused by their dtype and ndim.
    value = _item(value)
    dtype = str(getattr(value, "dtype", ""))
    if isinstance(value, bool) or "bool" in dtype or getattr(value, "ndim", 0) != 0:
        raise StateError(f"loader state has {name} {value!r}; expected an integer")
    try:
        return operator.index(value)
    except TypeError:
        raise StateError(f"loader state has {name} {value!r}; expected an integer") from None
