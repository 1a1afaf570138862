"""``--dlio`` against every workload config DLIO ships (tests/data/dlio: their values).

Each one either maps onto the files kind with DLIO's figures (format, files, samples
per file, record size and spread, batch, threads, compute, epochs, AU), or is refused
with a ConfigError naming the file, the key, the value and what is supported; keys
that are not modelled are named in the description, never dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from headrace.bench._dlio import BUILTIN_DLIO, _image_side, dlio_workload, resolve_dlio
from headrace.cli import main
from headrace.errors import ConfigError

DLIO = Path(__file__).parent.parent / "data" / "dlio"
BUILTIN = Path(BUILTIN_DLIO)


def _config(name: str) -> Path:
    """DLIO's config ``name``: one that ships with headrace, or a copy under tests/data."""
    shipped = BUILTIN / f"{name}.yaml"
    return shipped if shipped.exists() else DLIO / f"{name}.yaml"


# What each config maps to at --scale 1 --record-scale 1: dataset keys, reader keys, and
# (batch, steps per epoch, epochs, compute mean, compute stdev); "shown" is the format
# as the description names it. Reader keys are (decode_threads, in_flight, prefetch): with
# data_loader pytorch, prefetch is what DLIO's torch DataLoader queues, read_threads
# workers x ceil(prefetch_size / read_threads) batches (was prefetch_size: 2 for UNet3D).
MAPS: dict[str, dict[str, Any]] = {
    "unet3d_a100": {
        "ds": ("npz", 168, 1, 146_600_628, 68_341_808),
        "rd": (4, 8, 4),
        "train": (7, 24, 5, 0.636, 0.0),
        "shown": "npz",
    },
    "unet3d_v100": {
        "ds": ("npz", 168, 1, 146_600_628, 68_341_808),
        "rd": (4, 8, 4),
        "train": (4, 42, 5, 1.3604, 0.0),
        "shown": "npz",
    },
    # DLIO's older names: dlio_npz is npz
    "unet3d": {
        "ds": ("npz", 168, 1, 146_600_628, 68_341_808),
        "rd": (4, 8, 2),
        "train": (4, 42, 5, 1.3604, 0.0),
        "shown": "dlio_npz as npz",
    },
    "unet3d_h100_s3": {
        "ds": ("npz", 168, 1, 146_600_628, 0),
        "rd": (4, 8, 4),
        "train": (7, 24, 7, 0.323, 0.0),
        "shown": "npz",
    },
    "resnet50_v100": {
        "ds": ("png", 1_281_167, 1, 114_660, None),
        "rd": (8, 16, 8),
        "train": (64, 20_018, 1, 0.195, 0.0),
        "shown": "png",
    },
    "resnet50_a100": {
        "ds": ("npy", 2, 800, 114_660, 0),
        "rd": (8, 16, 2),
        "train": (400, 4, 5, 0.435, 0.0),
        "shown": "tfrecord as npy",
    },
    # "epoch: 5" is not DLIO's key: DLIO runs its default of 1 epoch, as here
    "resnet50_h100_dlio": {
        "ds": ("npy", 1_281_167, 1251, 114_660, 0),
        "rd": (8, 16, 8),
        "train": (64, 1_281_167 * 1251 // 64, 1, 0.103, 0.0),
        "shown": "tfrecord as npy",
    },
    "resnet50_tf": {
        "ds": ("npy", 1024, 1251, 114_660, 0),
        "rd": (8, 16, 2),
        "train": (64, 20_016, 1, 0.098, 0.0),
        "shown": "tfrecord as npy",
    },
    # no batch_size: DLIO's 1
    "resnet50_jpeg": {
        "ds": ("jpeg", 1024, 1, 150_528, None),
        "rd": (8, 16, 8),
        "train": (1, 1024, 1, 0.1, 0.0),
        "shown": "jpeg",
    },
    "cosmoflow_h100": {
        "ds": ("raw", 524_288, 1, 2_828_486, 71_311),
        "rd": (4, 8, 2),
        "train": (1, 524_288, 5, 0.0035, 0.0),
        "shown": "tfrecord as raw",
    },
    "cosmoflow_v100": {
        "ds": ("raw", 524_288, 1, 2_828_486, 71_311),
        "rd": (4, 8, 2),
        "train": (1, 524_288, 4, 0.00936, 0.0),
        "shown": "tfrecord as raw",
    },
    "cosmoflow_pt": {
        "ds": ("npz", 524_288, 1, 2_898_688, 79_244),
        "rd": (4, 8, 2),
        "train": (1, 524_288, 4, 0.0099, 0.0),
        "shown": "npz",
    },
    # no dataset.format: DLIO's default is tfrecord, not npz
    "cosmoflow": {
        "ds": ("npy", 1024, 512, 131_072, 0),
        "rd": (8, 16, 2),
        "train": (1, 524_288, 4, 0.1, 0.0),
        "shown": "tfrecord as npy",
    },
    "bert_v100": {
        "ds": ("npy", 500, 313_532, 2500, 0),
        "rd": (1, 2, 2),
        "train": (48, 1000, 1, 0.968, 0.0),
        "shown": "tfrecord as npy",
    },
    "bert": {
        "ds": ("npy", 500, 313_532, 2500, 0),
        "rd": (1, 2, 2),
        "train": (48, 1000, 1, 0.968, 0.0),
        "shown": "dlio_tfrecord as npy",
    },
    # no read_threads: DLIO's default is 1 (its ConfigArguments), not 4
    "dlrm": {
        "ds": ("npy", 1, 4_195_198_976, 327_680, 0),
        "rd": (1, 2, 2),
        "train": (2048, 32_768, 1, 0.064296, 0.0),
        "shown": "indexed_binary as npy",
    },
    "llama_7b": {
        "ds": ("npy", 1, 1_048_576, 2048, 0),
        "rd": (1, 2, 2),
        "train": (16, 65_536, 3, 2.44, 0.0),
        "shown": "mmap_indexed_binary as npy",
    },
    "llama_70b": {
        "ds": ("npy", 1, 1_048_576, 2048, 0),
        "rd": (1, 2, 2),
        "train": (16, 5, 1, 5.0, 0.0),
        "shown": "mmap_indexed_binary as npy",
    },
    "megatron_deepspeed": {
        "ds": ("npy", 1, 277_203_535, 2048, 0),
        "rd": (1, 2, 2),
        "train": (1024, 270_706, 311_541, 8.99, 0.0),
        "shown": "mmap_indexed_binary as npy",
    },
    "default": {
        "ds": ("npz", 64, 1, 4096, 0),
        "rd": (1, 2, 2),
        "train": (4, 16, 10, 1.0, 0.0),
        "shown": "dlio_npz as npz",
    },
}

# Refused, with the key and value named and what is supported instead.
REFUSED = {
    "unet3d_h100_adlsgen2": "storage.storage_type 'adls_gen2' is not supported: local_fs or s3",
    "krehm": "storage.storage_type 'fsspec_fs' is not supported: local_fs or s3",
    "daos_pytorch": "storage.storage_type 'daos_pytorch' is not supported: local_fs or s3",
    "dlrm_s3dlio_file": "dataset.format 'parquet' is not supported: headrace reads npz,",
    "llama_70b_zero3": "workflow.train is false: DLIO reads no data then",
}

# Keys of the config that DLIO acts on and headrace does not: each must be named.
NAMED = {
    "unet3d_a100": ["checkpoint", "dataset.record_length_bytes_resize", "reader.sample_shuffle"],
    "unet3d_h100_s3": [
        "storage.storage_options.access_key_id",
        "storage.storage_options.secret_access_key",
        "storage.storage_options.region",
        "storage.storage_options.s3_force_path_style",
        "storage.storage_options.s3_max_attempts",
    ],
    "resnet50_h100_dlio": ["dataset.record_length_resize"],
    "bert_v100": ["checkpoint", "reader.transfer_size", "train.seed_change_epoch"],
    "dlrm": ["dataset.num_files_eval", "train.total_eval_steps"],
    "dlrm_s3dlio_file": [],
    "default": ["evaluation", "workflow.evaluation", "dataset.num_subfolders_train"],
    "llama_7b": ["checkpoint", "model.tensor_parallelism"],
}
# Keys DLIO does not read either (it ignores them), named apart with the closest key.
# record_length_std: DLIO reads record_length_stdev (or record_length_bytes_stdev), and its
# records are one size; read here, ResNet-50's 115 kB records were 14 kB to 430 kB.
UNKNOWN = {
    "resnet50_h100_dlio": [
        "train.epoch (did you mean epochs?)",
        "dataset.record_length_std (did you mean record_length_stdev?)",
    ],
    "resnet50_v100": ["dataset.record_length_std (did you mean record_length_stdev?)"],
    # a top-level section DLIO does not read (it reads model.transformer)
    "llama_7b": ["transformer"],
    # DLIO reads workflow.evaluation: with do_eval it does not evaluate (its default)
    "dlrm": ["workflow.do_eval (did you mean evaluation?)"],
}
# Keys that are modelled (or inert here), never named as not modelled.
NOT_NAMED = {
    # workflow.checkpoint: false, so DLIO does not checkpoint: the section is inert
    "unet3d_h100_s3": ["checkpoint", "storage.storage_options.endpoint_url"],
    "default": ["dataset.format", "reader.batch_size", "train.epochs"],
    "resnet50_v100": ["dataset.record_length_std", "reader.read_threads"],
    # an evaluation section DLIO does not act on: workflow.evaluation is not on (do_eval is
    # not DLIO's key), and DLIO's default is off; it read "not modelled: evaluation"
    "dlrm": ["evaluation", "workflow.do_eval"],
}


def test_every_config_dlio_ships_is_mapped_or_refused() -> None:
    names = {p.stem for p in DLIO.glob("*.yaml")} | {"cosmoflow_h100"}  # this one ships
    assert names == set(MAPS) | set(REFUSED)


@pytest.mark.parametrize("name", sorted(MAPS))
def test_a_dlio_config_maps_to_its_figures(name: str) -> None:
    want = MAPS[name]
    wl = dlio_workload(str(_config(name)))
    fmt, files, per_file, record, stdev = want["ds"]
    ds = wl.dataset
    assert (ds["format"], ds["files"], ds["samples_per_file"]) == (fmt, files, per_file)
    if fmt in ("jpeg", "png"):  # the record sizes the image; its stored size is measured
        side = _image_side(fmt, record)
        assert "record_bytes" not in ds and ds["image_hw"] == [side, side]
    else:
        assert ds["record_bytes"] == record and ds.get("record_bytes_stdev") == stdev
    threads, in_flight, prefetch = want["rd"]
    rd = wl.reader
    assert (rd["decode_threads"], rd["in_flight"], rd["prefetch"]) == (threads, in_flight, prefetch)
    batch, steps, epochs, compute, compute_stdev = want["train"]
    tr = wl.train
    assert (tr.batch_size, tr.steps, tr.trials) == (batch, steps, epochs)
    assert tr.computation_time == pytest.approx(compute)
    assert tr.computation_time_stdev == pytest.approx(compute_stdev)
    assert tr.au_threshold == 0.90
    assert f"; {want['shown']};" in wl.description
    text, _, unknown = wl.description.partition(
        "; keys DLIO does not read (ignored, as DLIO ignores them): "
    )
    ignored = text.partition("not modelled: ")[2].split(", ")
    for key in UNKNOWN.get(name, []):
        assert key in unknown.split(", ") and key not in ignored, (key, wl.description)
    for key in NAMED.get(name, []):
        assert key in ignored, (key, wl.description)
    for key in NOT_NAMED.get(name, []):
        assert key not in ignored, (key, wl.description)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_dlio_config_headrace_cannot_read_is_refused_by_name(name: str) -> None:
    path = str(_config(name))
    with pytest.raises(ConfigError) as info:
        dlio_workload(path)
    assert str(info.value).startswith(f"{path}: ") and REFUSED[name] in str(info.value)


def test_s3_config_reads_its_bucket_at_the_first_endpoint() -> None:
    # data_folder is already the s3:// URL; DLIO's rank 0 of one host takes the first of
    # the comma-separated endpoints. Before: s3://s3pytorchconnector/s3://s3pytorchconnector
    # at "http://localhost:9020,http://localhost:9021,http://localhost:9022".
    wl = dlio_workload(str(DLIO / "unet3d_h100_s3.yaml"))
    assert wl.reader["storage"] == "s3"
    assert wl.reader["storage_url"] == "s3://s3pytorchconnector"
    assert wl.reader["endpoint"] == "http://localhost:9020"
    assert "endpoint_url: the first of 3" in wl.description


@pytest.mark.parametrize(
    ("name", "scale", "files", "per_file"),
    [
        # fewer files than one at this scale: the one file holds that share of the samples
        ("llama_7b", 0.001, 1, 1049),
        ("dlrm", 1e-6, 1, 4195),
        ("megatron_deepspeed", 1e-5, 1, 2772),
        # at least one batch
        ("resnet50_a100", 0.1, 1, 400),
        ("llama_70b", 1e-9, 1, 16),
        # one file or more: files scale, samples per file stay
        ("resnet50_tf", 0.002, 2, 1251),
        ("unet3d_a100", 0.05, 8, 1),
    ],
)
def test_scale_shrinks_a_one_file_dataset_within_the_file(
    name: str, scale: float, files: int, per_file: int
) -> None:
    # Before, llama's one file kept its 1,048,576 records at any --scale (2 GiB at
    # --record-scale 1), megatron's 277 M (568 GB) and DLRM's 4.2 G (1.4 PB).
    wl = dlio_workload(str(_config(name)), scale=scale)
    assert (wl.dataset["files"], wl.dataset["samples_per_file"]) == (files, per_file)
    if files == 1 and per_file < MAPS[name]["ds"][2]:
        assert f"1 file of {per_file:,} samples" in wl.description


def test_a_scaled_one_file_config_writes_and_reads_its_share(tmp_path: Path) -> None:
    # llama_7b at --scale 0.0005: one NPY of 524 records of 2048 x 0.01 bytes, 32 steps of
    # 16, read by every variant; before, 1,048,576 records (21 MB here, 2 GiB unscaled).
    out = tmp_path / "r.json"
    args = ["bench", "--dlio", str(DLIO / "llama_7b.yaml"), "--root", str(tmp_path / "d")]
    args += ["--scale", "0.0005", "--record-scale", "0.01", "--no-isolate", "-q"]
    args += ["--steps", "3", "--trials", "1", "--json", str(out)]
    assert main(args) == 0
    (npy,) = (tmp_path / "d").rglob("*.npy")
    assert np.load(npy, mmap_mode="r").shape == (524, 20)
    report = json.loads(out.read_text())
    results = report["results"]
    assert {r["variant"] for r in results} == {"map-style", "iterable", "headrace"}
    assert all(r["steps_per_trial"] == 3 for r in results)
    assert all(r["bytes_delivered"] >= 3 * 16 * 20 for r in results)
    assert len({r["digest"] for r in results if r["variant"] != "iterable"}) == 1


def _yaml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return str(path)


def test_workflow_flags_name_what_dlio_does_beside_training(tmp_path: Path) -> None:
    base = "dataset: {format: npz}\n"
    # checkpointing on with DLIO's defaults (no section): named
    wl = dlio_workload(_yaml(tmp_path, base + "workflow: {train: true, checkpoint: true}\n"))
    assert "not modelled: workflow.checkpoint" in wl.description
    # off, with a section: nothing DLIO does, nothing named
    text = base + "workflow: {checkpoint: false}\ncheckpoint: {checkpoint_folder: c}\n"
    assert "not modelled" not in dlio_workload(_yaml(tmp_path, text)).description
    path = _yaml(tmp_path, base + "workflow: {generate_data: true, train: false}\n")
    with pytest.raises(ConfigError, match=r"w\.yaml: workflow\.train is false: DLIO reads"):
        dlio_workload(path)


def test_numbers_with_an_exponent_and_no_dot_are_numbers_as_dlio_reads_them(
    tmp_path: Path,
) -> None:
    # PyYAML reads 1e-3 as a string (YAML 1.1 wants 1.0e-3) and the workload was refused,
    # "must be a number (got '1e-3')"; DLIO reads its configs through OmegaConf, which
    # takes it as 0.001.
    text = "dataset: {format: npz, record_length_bytes: 15e4}\ntrain: {computation_time: 1e-3}\n"
    wl = dlio_workload(_yaml(tmp_path, text))
    assert wl.train.computation_time == 0.001
    assert wl.dataset["record_bytes"] == 150_000
    # a string that only starts like one stays a string, and is refused as before
    with pytest.raises(ConfigError, match=r"must be a number >= 0 \(got '1e-3x'\)"):
        dlio_workload(_yaml(tmp_path, "dataset: {}\ntrain: {computation_time: 1e-3x}\n"))


def test_computation_time_forms_dlio_documents(tmp_path: Path) -> None:
    def train(text: str) -> Any:
        return dlio_workload(_yaml(tmp_path, f"dataset: {{}}\ntrain: {text}\n")).train

    tr = train("{computation_time: {mean: 0.5, stdev: 0.1, type: normal}}")
    assert (tr.computation_time, tr.computation_time_stdev) == (0.5, 0.1)
    assert train("{computation_time: {mean: 0.5}}").computation_time_stdev == 0.0
    # DLIO sets the distribution's stdev from computation_time_stdev when both are given
    tr = train("{computation_time: {mean: 0.5, stdev: 0.1}, computation_time_stdev: 0.2}")
    assert tr.computation_time_stdev == 0.2
    with pytest.raises(ConfigError) as info:
        train("{computation_time: {min: 0.5, max: 1.5, type: uniform}}")
    msg = str(info.value)
    assert "train.computation_time {'min': 0.5, 'max': 1.5, 'type': 'uniform'}" in msg
    assert "only a number or a normal distribution" in msg


def test_seed_reader_alias_and_record_dims(tmp_path: Path) -> None:
    # DLIO's seed is train.seed; its reader section may be spelled data_reader; record_dims
    # x record_element_type's size is the record, before record_length.
    text = (
        "dataset: {format: npy, record_length: 999, record_dims: [4, 8], "
        "record_element_type: float32}\n"
        "data_reader: {batch_size: 6, read_threads: 3, prefetch_size: 5}\n"
        "train: {seed: 7}\n"
    )
    wl = dlio_workload(_yaml(tmp_path, text))
    assert wl.train.seed == 7 and wl.train.batch_size == 6
    assert (wl.reader["decode_threads"], wl.reader["prefetch"]) == (3, 5)
    assert wl.dataset["record_bytes"] == 4 * 8 * 4
    assert "not modelled" not in wl.description
    bad = "dataset: {record_dims: [4, 8], record_element_type: quux}\n"
    with pytest.raises(ConfigError, match=r"dataset\.record_element_type 'quux'"):
        dlio_workload(_yaml(tmp_path, bad))


@pytest.mark.parametrize("limit", [0, -1, -5])
def test_total_training_steps_at_or_below_zero_is_no_limit(limit: int, tmp_path: Path) -> None:
    # DLIO stops where its step count equals the limit: never, for 0 (was refused here)
    text = f"dataset: {{num_files_train: 8}}\ntrain: {{total_training_steps: {limit}}}\n"
    assert dlio_workload(_yaml(tmp_path, text)).train.steps == 8
    with pytest.raises(ConfigError, match="total_training_steps must be a whole number"):
        dlio_workload(_yaml(tmp_path, "dataset: {}\ntrain: {total_training_steps: 2.5}\n"))


def test_record_length_std_is_not_a_stdev_as_dlio_reads_it(tmp_path: Path) -> None:
    # DLIO reads record_length_stdev (record_length_bytes_stdev), never record_length_std
    # (resnet50_h100/_v100.yaml): its records are one size. Read here, ResNet-50's
    # tfrecords as npy were 14 kB to 430 kB (133 kB on average for 115 kB).
    ds = "dataset: {format: %s, record_length: 114660, %s: 136076}\n"
    wl = dlio_workload(_yaml(tmp_path, ds % ("tfrecord", "record_length_std")))
    assert wl.dataset.get("record_bytes_stdev", 0) == 0
    assert "dataset.record_length_std (did you mean record_length_stdev?)" in wl.description
    wl = dlio_workload(_yaml(tmp_path, ds % ("tfrecord", "record_length_stdev")))
    assert wl.dataset["record_bytes_stdev"] == 136076
    wl = dlio_workload(_yaml(tmp_path, ds % ("png", "record_length_stdev")))
    side = wl.dataset["image_hw"][0]
    assert f"record stdev 136076 not modelled: images are all {side}x{side}" in wl.description


def test_records_scaled_below_a_byte_are_refused_and_records_outweighed_are_said(
    tmp_path: Path,
) -> None:
    # A record scaled under a byte was made 1 byte while the compute time went on
    # shrinking: UNet3D at --record-scale 1e-9 asked 9,947 GB/s per accelerator, not 3.
    from headrace.bench._cli import _demand
    from headrace.bench._kind import make_kind

    path = str(BUILTIN / "unet3d_h100.yaml")
    with pytest.raises(ConfigError) as info:
        dlio_workload(path, scale=0.1, record_scale=1e-9)
    assert str(info.value) == (
        f"{path}: --record-scale 1e-09 makes the dataset's 146,600,628 B records 0.15 B, "
        "less than a byte: give --record-scale >= 6.82e-09"
    )
    # 15 B records in NPZ files of one: the container outweighs them, and the demand
    # line says how far it is from the YAML's
    demand = _demand(make_kind(dlio_workload(path, scale=0.1, record_scale=1e-7), str(tmp_path)))
    assert "; but records are stored as " in demand and " for the 15 B asked" in demand
    assert "x the YAML's demand, as the compute time scales with --record-scale" in demand
    demand = _demand(make_kind(dlio_workload(path, scale=0.1, record_scale=0.01), str(tmp_path)))
    assert "but records" not in demand


def test_a_section_dlio_does_not_read_is_named_with_the_closest(tmp_path: Path) -> None:
    # "trian:" ran without compute and "readr:" at batch 1, said only as "not modelled:
    # readr, trian", as if DLIO read them (it ignores them whole, as the run does).
    text = (
        "dataset: {num_files_train: 16}\ntrian: {computation_time: 0.5}\nreadr: {batch_size: 4}\n"
    )
    wl = dlio_workload(_yaml(tmp_path, text))
    assert wl.train.computation_time == 0 and wl.train.batch_size == 1
    assert "not modelled" not in wl.description
    assert wl.description.endswith(
        "; keys DLIO does not read (ignored, as DLIO ignores them): readr (did you mean "
        "reader?), trian (did you mean train?)"
    )
    # the sections about how DLIO runs are still left out of both lists
    wl = dlio_workload(_yaml(tmp_path, "dataset: {}\nhydra: {run: {dir: x}}\nlogging: {}\n"))
    assert "hydra" not in wl.description and "logging" not in wl.description


def test_read_threads_zero_is_one_thread_and_said(tmp_path: Path) -> None:
    # DLIO's pytorch loader reads in the main thread at 0 (no overlap with compute)
    wl = dlio_workload(_yaml(tmp_path, "dataset: {}\nreader: {read_threads: 0}\n"))
    assert (wl.reader["decode_threads"], wl.reader["in_flight"]) == (1, 2)
    assert "reader.read_threads 0 (loading in the main thread)" in wl.description


@pytest.mark.parametrize(
    ("name", "scale", "record_scale", "ext", "within"),
    [
        ("resnet50_v100", 0.00005, 0.01, "png", 3.0),
        ("resnet50_jpeg", 0.05, 0.01, "jpg", 3.0),
        # a whole record: the stored image is the record, give or take a quarter
        ("resnet50_jpeg", 0.005, 1.0, "jpg", 1.25),
    ],
)
def test_dlio_images_are_the_size_of_a_record(
    name: str, scale: float, record_scale: float, ext: str, within: float, tmp_path: Path
) -> None:
    # DLIO's image is a record; these were the kind's 640 x 640 RGB at any --record-scale:
    # 1.2 MB PNGs for ResNet-50's 1.1 kB records at --record-scale 0.01. At the image's
    # RGB size, ResNet-50's 150.5 kB JPEG records were 37 kB JPEGs.
    wl = dlio_workload(str(_config(name)), scale=scale, record_scale=record_scale)
    side = wl.dataset["image_hw"][0]
    assert wl.dataset["image_hw"] == [side, side]
    assert "record_bytes" not in wl.dataset  # an image's stored size is measured
    record = max(1, round(MAPS[name]["ds"][3] * record_scale))  # the YAML's, scaled
    args = ["bench", "--dlio", str(_config(name)), "--root", str(tmp_path)]
    args += ["--scale", str(scale), "--record-scale", str(record_scale), "--no-isolate", "-q"]
    assert main([*args, "--steps", "1", "--trials", "1"]) == 0
    sizes = [p.stat().st_size for p in tmp_path.rglob(f"*.{ext}")]
    assert sizes and all(record / within < n < record * within for n in sizes), (record, sizes)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # were "could not convert string to float: 'abc'", naming neither file nor key
        ("train: {computation_time: abc}", "train.computation_time must be a number >= 0"),
        ("train: {computation_time: {mean: x}}", "train.computation_time.mean must be a number"),
        ("train: {computation_time: -1}", "train.computation_time must be a number >= 0"),
        (
            "train: {computation_time: 1, computation_time_stdev: -0.5}",
            "train.computation_time_stdev must be a number >= 0 (got -0.5)",
        ),
        (
            "reader: {preprocess_time: {mean: 0.1, stdev: -1}}",
            "reader.preprocess_time.stdev must be a number >= 0",
        ),
        # was an AttributeError traceback
        (
            "storage: {storage_type: s3, storage_options: 'http://x'}",
            "storage.storage_options must be a mapping of keys (got 'http://x')",
        ),
        # was "train: au_threshold must be in (0, 1] (got 90.0)": DLIO's au is a fraction
        ("metric: {au: 90}", "metric.au must be a fraction in (0, 1] (got 90)"),
        # was read as 2 threads without a word
        ("reader: {read_threads: 2.5}", "reader.read_threads must be a whole number >= 0"),
        (
            "dataset: {format: npy, record_dims: [4, 0]}",
            "dataset.record_dims must be a list of whole numbers > 0 (got [4, 0])",
        ),
        (
            "dataset: {format: npy, record_dims: [4], record_element_type: halfword}",
            "dataset.record_element_type 'halfword' is not a NumPy type",
        ),
        ("reader: {prefetch_size: 1.5}", "reader.prefetch_size must be a whole number >= 0"),
        # was "[dataset]: image_hw = [285, 285] cannot be used: ... jpeg files hold one sample"
        (
            "dataset: {format: png, num_samples_per_file: 2}",
            "dataset.num_samples_per_file 2 with format 'png': an image file holds one sample",
        ),
    ],
)
def test_a_bad_dlio_value_is_named_with_its_file_and_key(
    text: str, message: str, tmp_path: Path
) -> None:
    head = "" if text.startswith("dataset:") else "dataset: {format: npz}\n"
    path = _yaml(tmp_path, head + text + "\n")
    with pytest.raises(ConfigError) as info:
        dlio_workload(path)
    assert str(info.value).startswith(f"{path}: ") and message in str(info.value), info.value


def test_a_dlio_run_config_under_workload_is_read(tmp_path: Path) -> None:
    # DLIO's run output (hydra's .hydra/config.yaml) holds the workload under "workload:";
    # was "not a DLIO workload (expected a mapping with 'dataset')"
    text = (BUILTIN / "cosmoflow_h100.yaml").read_text()
    nested = "workload:\n" + "".join(f"  {line}\n" for line in text.splitlines())
    wl = dlio_workload(_yaml(tmp_path, nested + "hydra: {run: {dir: out}}\n"))
    assert wl.dataset == dlio_workload(str(BUILTIN / "cosmoflow_h100.yaml")).dataset
    assert wl.train.trials == 5


def test_dlio_metric_exclusions_other_than_its_default_are_named(tmp_path: Path) -> None:
    # AU leaves out the first step (output.metric's default); other exclusions change it
    base = "dataset: {}\n"
    text = base + "output: {folder: out, metric: {exclude_start_steps: 1, exclude_end_steps: 0}}\n"
    assert "not modelled" not in dlio_workload(_yaml(tmp_path, text)).description
    text = base + "output: {metric: {exclude_start_steps: 3}}\n"
    wl = dlio_workload(_yaml(tmp_path, text))
    assert "not modelled: output.metric.exclude_start_steps" in wl.description


def test_a_key_dlio_does_not_read_is_named_with_the_closest_one(tmp_path: Path) -> None:
    # A misspelt key was named with the keys DLIO reads and headrace does not model
    # ("not modelled: train.computation_tme"), and the run went on without compute; a
    # misspelt num_files_train gave 1 file where DLIO's default is 8.
    text = "dataset: {num_fils_train: 40, format: npz}\ntrain: {computation_tme: 0.05}\n"
    text += "reader: {batch_size: 4, data_loader: pytorch}\n"
    wl = dlio_workload(_yaml(tmp_path, text))
    said = wl.description.partition("; keys DLIO does not read (ignored, as DLIO ignores them): ")[
        2
    ]
    assert said == (
        "dataset.num_fils_train (did you mean num_files_train?), "
        "train.computation_tme (did you mean computation_time?)"
    )
    assert "not modelled: reader.data_loader;" in wl.description
    assert wl.dataset["files"] == 8 and wl.train.computation_time == 0


def test_misspelt_metric_and_storage_keys_are_named_as_keys_dlio_does_not_read(
    tmp_path: Path,
) -> None:
    # DLIO reads metric.au and storage.storage_type/storage_root/storage_options only:
    # "metric.auu" and "storage.storage_tpye" were listed as "not modelled", as if DLIO
    # read them and headrace did not (fails before: no "did you mean" for either).
    text = "dataset: {format: npz}\nmetric: {auu: 0.8}\nstorage: {storage_tpye: s3}\n"
    wl = dlio_workload(_yaml(tmp_path, text))
    said = wl.description.partition("; keys DLIO does not read (ignored, as DLIO ignores them): ")
    assert said[2] == (
        "metric.auu (did you mean au?), storage.storage_tpye (did you mean storage_type?)"
    )
    assert "not modelled" not in wl.description
    assert wl.train.au_threshold == 0.90 and wl.reader.get("storage", "local") == "local"


def test_files_added_so_that_an_epoch_has_a_batch_are_said(tmp_path: Path) -> None:
    # 4 files of 3 samples hold no batch of 20: the run made it 7 files and its plan still
    # read "files x1" (fails before: no word of the 7).
    text = "dataset: {format: hdf5, num_files_train: 4, num_samples_per_file: 3}\n"
    wl = dlio_workload(_yaml(tmp_path, text), batch_size=20)
    assert wl.dataset["files"] == 7
    assert (
        "1 epoch of 1 step; 7 files, not 4: the scaled epoch of 12 samples holds no batch of "
        "20 (DLIO: no step), one epoch per trial" in wl.description
    )
    assert "files, not" not in dlio_workload(_yaml(tmp_path, text), batch_size=12).description


def test_a_builtin_dlio_workload_is_found_by_name_and_anything_else_is_refused(
    tmp_path: Path,
) -> None:
    shipped = _config("unet3d_h100")
    assert resolve_dlio("unet3d_h100") == resolve_dlio("unet3d_h100.yaml") == str(shipped)
    own = tmp_path / "unet3d_h100.yaml"  # a file of that name is the file, not the built-in
    own.write_text(shipped.read_text())
    assert resolve_dlio(str(own)) == str(own)
    with pytest.raises(ConfigError, match=r"'unet3d_h10': no such file \(did you mean "):
        resolve_dlio("unet3d_h10")
    with pytest.raises(ConfigError, match=r": a folder; give a DLIO workload YAML, or a built"):
        resolve_dlio(str(tmp_path))
    with pytest.raises(ConfigError, match=r"no such file; give .*cosmoflow_h100, resnet50_h100"):
        resolve_dlio(str(tmp_path / "unet3d_h100x.yaml"))  # a path is not looked up by name


def test_flow_collections_nested_past_the_limit_are_refused_before_parsing_on(
    tmp_path: Path,
) -> None:
    # 100,000 '[' took PyYAML's scanner 3.3 s of CPU to end in a RecursionError (its
    # look-ahead walks every open level per token); now the 65th level is refused.
    from headrace.bench._dlio import MAX_FLOW_DEPTH

    path = tmp_path / "deep.yaml"
    depth = MAX_FLOW_DEPTH
    path.write_text("dataset: " + "[" * depth + "]" * depth + "\n")
    with pytest.raises(ConfigError, match=r"deep\.yaml: dataset must be a mapping"):
        dlio_workload(str(path))  # as deep as allowed: parsed, then refused as a DLIO file
    path.write_text("dataset: " + "[" * (depth + 1) + "]" * (depth + 1) + "\n")
    message = (
        rf"deep\.yaml: not valid YAML \(more than {depth} nested '\[' or '\{{' in "
        rf"\"{path}\", line 1, column {len('dataset: ') + depth + 1}\)"
    )
    with pytest.raises(ConfigError, match=message):
        dlio_workload(str(path))
    path.write_text("[" * 100_000)
    with pytest.raises(ConfigError, match=rf"more than {depth} nested"):
        dlio_workload(str(path))
