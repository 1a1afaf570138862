"""The keys of a DLIO workload YAML that ``headrace bench --dlio`` reads, and those it
names: keys DLIO reads that the mapping does not model (listed in the workload's
description), and keys DLIO itself does not read (typos, another tool's), each with the
closest known one. Never dropped silently.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

__all__ = ["not_modelled", "unknown_keys"]


# The DLIO keys this mapping reads, per section; every other key of the YAML is
# named in the workload's description as not modelled, never dropped silently.
_READ: dict[str, frozenset[str]] = {
    "dataset": frozenset(
        {
            "data_folder",
            "format",
            "num_files_train",
            "num_samples_per_file",
            "record_length",
            "record_length_bytes",
            "record_length_bytes_stdev",
            "record_dims",
            "record_element_type",
            "record_length_stdev",
        }
    ),
    "reader": frozenset(
        {
            "batch_size",
            "odirect",
            "prefetch_size",
            "preprocess_time",
            "preprocess_time_stdev",
            "read_threads",
            "seed",
        }
    ),
    "train": frozenset(
        {"computation_time", "computation_time_stdev", "epochs", "seed", "total_training_steps"}
    ),
    "metric": frozenset({"au"}),
    "storage": frozenset({"storage_options", "storage_root", "storage_type"}),
    "model": frozenset({"name"}),
}
_READ["data_reader"] = _READ["reader"]  # DLIO's other name for the reader section
# The keys DLIO itself reads in the sections this mapping reads (its utils/config.py
# LoadConfig, 2025; older names its shipped configs still use): a key of these sections
# that is neither read here nor DLIO's is a typo, or another tool's, that DLIO ignores
# too. It is named apart from the keys not modelled, with the closest known key
# ("train.computation_tme": a run without compute, said only as "not modelled" before).
_DLIO_KEYS: dict[str, frozenset[str]] = {
    "dataset": frozenset(
        {
            "chunk_size",
            "compression",
            "compression_level",
            "daos_cont",
            "daos_pool",
            "enable_chunking",
            "eval_num_samples_per_file",
            "file_prefix",
            "generation_buffer_size",
            "hdf5",
            "keep_files",
            "num_files_eval",
            "num_subfolders_eval",
            "num_subfolders_train",
            "record_element_bytes",
            "record_length_bytes_resize",
            "record_length_resize",
        }
    ),
    "reader": frozenset(
        {
            "batch_size_eval",
            "computation_threads",
            "data_loader",
            "data_loader_classname",
            "data_loader_sampler",
            "dont_use_mmap",
            "file_access",
            "file_shuffle",
            "multiprocessing_context",
            "pin_memory",
            "read_type",
            "reader_classname",
            "sample_shuffle",
            "shuffle_size",
            "transfer_size",
            "transformed_record_dims",
            "transformed_record_element_type",
        }
    ),
    "train": frozenset({"seed_change_epoch", "total_eval_steps"}),
    # DLIO reads metric.au and storage's storage_type, storage_root and storage_options
    # only, as this mapping does: "metric.auu" and "storage.storage_tpye" were named "not
    # modelled", as if DLIO read them (it leaves its defaults, local_fs and 0.90, as here).
    "metric": frozenset(),
    "storage": frozenset(),
}
_DLIO_KEYS["data_reader"] = _DLIO_KEYS["reader"]
# storage_options keys read (the rest, e.g. credentials: AWS_* variables here).
_OPTIONS = frozenset({"endpoint_url", "endpoint"})
# Sections that say how DLIO itself runs, not what is read or computed.
_RUNNER = frozenset({"framework", "workflow", "output", "hydra", "profiling", "logging"})
# output.metric as headrace measures AU: each epoch's first step left out, as DLIO's own
# defaults do (_au.py).
_METRIC_DEFAULTS = {"exclude_start_steps": 1, "exclude_end_steps": 0}
# workflow keys about how DLIO runs; any other that is on (checkpoint, evaluation) is named.
_WORKFLOW = frozenset({"generate_data", "train", "debug", "profiling"})
# The workflow keys DLIO reads (debug: its older configs'); any other turns nothing on in
# DLIO (dlrm.yaml's "do_eval"), and is named with the closest.
_WORKFLOW_KEYS = _WORKFLOW | {"checkpoint", "evaluation"}
# DLIO's own attribute names for them (args.do_eval), too far from the keys for difflib.
_WORKFLOW_ATTRS = {"do_eval": "evaluation", "do_checkpoint": "checkpoint", "do_train": "train"}
# Sections DLIO acts on only when workflow turns them on (its do_checkpoint and do_eval
# default to off): inert unless it does. A checkpoint section with no workflow switch was
# named "not modelled", as if DLIO checkpointed.
_SWITCHED = {"checkpoint": "checkpoint", "evaluation": "evaluation"}


# The section DLIO ignores where "data_reader" is given too (its LoadConfig reads one).
_SHADOWED = "reader"

# The sections DLIO's LoadConfig reads: any other (a misspelt "trian:", or llama_7b's
# top-level "transformer:", read under model since) it ignores whole.
_DLIO_SECTIONS = frozenset(
    {"checkpoint", "data_reader", "dataset", "evaluation", "framework", "metric", "model"}
    | {"output", "profiling", "reader", "storage", "train", "workflow"}
)


def unknown_keys(doc: Mapping[str, Any]) -> list[str]:
    """``section.key (did you mean K?)`` for each key of the sections read here that
    neither this mapping nor DLIO reads (DLIO ignores it: its default stands), and
    ``section (did you mean S?)`` for a section DLIO does not read: "trian:" ran
    without compute, said only as "not modelled: trian"."""
    out: list[str] = []
    for section in doc:
        if section not in _DLIO_SECTIONS and section not in _RUNNER:
            close = difflib.get_close_matches(str(section), sorted(_DLIO_SECTIONS), n=1)
            out.append(f"{section}" + (f" (did you mean {close[0]}?)" if close else ""))
    if _SHADOWED in doc and "data_reader" in doc:  # DLIO reads data_reader, reader not at all
        out.append(f"{_SHADOWED} (DLIO reads data_reader where both are given)")
    workflow = doc.get("workflow")
    if isinstance(workflow, Mapping):
        for key in workflow:
            if key not in _WORKFLOW_KEYS:
                close = difflib.get_close_matches(str(key), sorted(_WORKFLOW_KEYS), n=1)
                close = [_WORKFLOW_ATTRS[key]] if key in _WORKFLOW_ATTRS else close
                out.append(f"workflow.{key}" + (f" (did you mean {close[0]}?)" if close else ""))
    for section, dlio in _DLIO_KEYS.items():
        if section == _SHADOWED and "data_reader" in doc:
            continue
        value = doc.get(section)
        if not isinstance(value, Mapping):
            continue
        known = _READ[section] | dlio
        for key in value:
            if key not in known:
                close = difflib.get_close_matches(str(key), sorted(known), n=1)
                out.append(f"{section}.{key}" + (f" (did you mean {close[0]}?)" if close else ""))
    return sorted(out)


def not_modelled(doc: Mapping[str, Any]) -> list[str]:
    """``section.key`` (or a whole ``section``) of a DLIO document that the mapping ignores,
    keys DLIO does not read left out (:func:`unknown_keys` names them)."""
    unknown = {k.partition(" ")[0] for k in unknown_keys(doc)}
    out: list[str] = []
    workflow = doc.get("workflow")
    workflow = workflow if isinstance(workflow, Mapping) else {}
    out += [f"workflow.{k}" for k, v in workflow.items() if v and k not in _WORKFLOW]
    output = doc.get("output")
    metric = output.get("metric") if isinstance(output, Mapping) else None
    if isinstance(metric, Mapping):  # AU's exclusions; DLIO's default leaves out step 1
        out += [
            f"output.metric.{k}"
            for k, v in metric.items()
            if _METRIC_DEFAULTS.get(str(k), object()) != v
        ]
    for section, value in doc.items():
        if section in _RUNNER or (section == _SHADOWED and "data_reader" in doc):
            continue
        if section in _SWITCHED and not workflow.get(_SWITCHED[section]):
            continue
        known = _READ.get(section)
        if known is None:
            out.append(str(section))
        elif isinstance(value, Mapping):
            out += [f"{section}.{k}" for k in value if k not in known]
            if section == "storage" and isinstance(value.get("storage_options"), Mapping):
                options = value["storage_options"]
                out += [f"storage.storage_options.{k}" for k in options if k not in _OPTIONS]
    return sorted(k for k in out if k not in unknown)
