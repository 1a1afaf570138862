"""DLIO's own workload YAMLs run through ``--dlio`` as upstream writes them (s51).

- ``dlrm.yaml`` (one file of 4,195,198,976 records of 327,680 B) at ``--scale 0.001
  --record-scale 0.01`` is one NPY file of 4.2 M records, 13.7 GB: the files kind made
  it whole in memory (the records, then ``np.save`` into a buffer, then its copy) and the
  bench was SIGKILLed by the OOM killer at 22 GB on a 24 GB host. An NPY file of several
  records is now written a chunk of records at a time, the same bytes.
- ``llama_1t.yaml`` (a checkpointing workload: ``workflow.train: True`` and no
  ``dataset`` section) was refused as "not a DLIO workload"; it is one, and the message
  now says what it lacks and what to give.
- ``cosmoflow_h100`` at ``--record-scale 0.01`` computes 35 us a step, and ``time.sleep``
  overran each to ~100 us: AU and ``max acc.`` credited the loader with the overrun
  (headrace ``0.98* ok`` at 0.15 of the 0.80 GB/s asked). The simulated accelerator now
  takes each overrun off the next steps' compute.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from headrace.bench._dlio import dlio_workload
from headrace.bench._kind import make_kind
from headrace.errors import ConfigError
from headrace.formats import encode, synthetic_arrays

DATA = Path(__file__).parent.parent / "data" / "dlio"


def _yaml(tmp_path: Path, samples: int, record: int) -> str:
    path = tmp_path / "big.yaml"
    path.write_text(
        "model: {name: big}\n"
        "dataset: {format: mmap_indexed_binary, num_files_train: 1, "
        f"num_samples_per_file: {samples}, record_length_bytes: {record}}}\n"
        "reader: {batch_size: 16}\n"
    )
    return str(path)


def test_a_streamed_npy_file_holds_the_bytes_made_whole(tmp_path: Path) -> None:
    # Records of an odd size, and more of them than one chunk holds, not a whole number
    # of chunks: the streamed file is np.save of the arrays synthetic_arrays makes.
    wl = dlio_workload(_yaml(tmp_path, 3_000_001, 7))
    kind = make_kind(wl, str(tmp_path / "root"))
    kind.generate()
    (path,) = kind.files()  # type: ignore[attr-defined]
    seed = wl.train.seed * 1_000_003
    whole = synthetic_arrays("npy", seed=seed, shape=(7,), samples_per_file=3_000_001)
    assert Path(path).read_bytes() == encode("npy", whole)
    assert np.load(path, mmap_mode="r").shape == (3_000_001, 7)


# The kernel's peak-RSS mark (VmHWM) is reset just before the dataset is written, so the
# imports do not count; made whole, a 192 MB file grew the process by 3 x its size.
_MEMORY_PROBE = """
import sys
from headrace.bench._dlio import dlio_workload
from headrace.bench._kind import make_kind

def status(field):
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field))

kind = make_kind(dlio_workload(sys.argv[1]), sys.argv[2])
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
base = status("VmRSS:")
kind.generate()
print((status("VmHWM:") - base) // 1024)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/clear_refs"), reason="needs Linux's VmHWM")
def test_one_large_npy_file_is_written_in_chunks_not_held_in_memory(tmp_path: Path) -> None:
    yaml = _yaml(tmp_path, 3_000_000, 64)  # 192 MB, as DLIO DLRM's one file, smaller
    out = subprocess.run(
        [sys.executable, "-c", _MEMORY_PROBE, yaml, str(tmp_path / "root")],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    grew_mib = int(out.stdout.split()[-1])
    assert grew_mib < 64, f"writing a 192 MB NPY file grew the process by {grew_mib} MiB"


def test_a_config_without_a_dataset_section_says_what_it_is(tmp_path: Path) -> None:
    # llama_1t.yaml as DLIO ships it: checkpointing only, no dataset section.
    path = tmp_path / "llama_1t.yaml"
    path.write_text(
        "model:\n  name: llama_405b\n  type: transformer\n\nframework: pytorch\n\n"
        "workflow:\n  generate_data: True\n  train: True\n  checkpoint: True\n\n"
        "checkpoint:\n  checkpoint_folder: checkpoints/llama_1t\n"
        "  time_between_checkpoints: 5\n"
    )
    with pytest.raises(ConfigError) as info:
        dlio_workload(str(path))
    message = str(info.value)
    assert "not a DLIO workload" not in message
    assert f"{path}: no dataset section" in message
    assert "checkpoint" in message and "give a dataset section" in message


def test_a_yaml_that_is_no_dlio_config_is_still_refused_as_one(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text("name: tokens\nkind: tokens\n")
    with pytest.raises(ConfigError, match=r"not a DLIO workload \(expected a mapping with"):
        dlio_workload(str(path))


def test_the_simulated_accelerator_computes_the_time_asked_for_over_its_steps() -> None:
    # CosmoFlow H100's 3.5 ms of compute at --record-scale 0.01: 35 us a step, which
    # time.sleep overran (timer slack) to ~100 us, every step. Whatever each sleep
    # overruns, the steps' compute in all exceeds what was asked for by one overrun at
    # most, so by no more than the longest sleep; sleeps of their own time each exceeded
    # it by the sum of all the overruns (~65 us x 2,000 steps).
    from headrace.bench._au import Accelerator

    device = Accelerator()
    asked = [35e-6] * 2_000
    slept = [device.compute(s) for s in asked]
    assert sum(slept) - sum(asked) <= max(slept)
    assert sum(slept) >= sum(asked) - 1e-9  # never less than asked for


def test_a_parquet_dataset_is_refused_naming_the_workload_that_reads_parquet(
    tmp_path: Path,
) -> None:
    # dlrm_s3dlio_file.yaml / _s3.yaml: DLIO's Parquet rows. The refusal listed the
    # formats read, and nothing a Parquet user could run instead.
    path = tmp_path / "dlrm_parquet.yaml"
    path.write_text(
        "dataset: {format: parquet, num_files_train: 64, num_samples_per_file: 1000000, "
        "record_length_bytes: 1024}\nreader: {batch_size: 2048}\n"
    )
    with pytest.raises(ConfigError) as info:
        dlio_workload(str(path))
    message = str(info.value)
    assert f"{path}: dataset.format 'parquet' is not supported" in message
    assert "headrace bench -w parquet" in message
