"""``--dlio`` YAMLs a storage engineer hand-edits: each case is one DLIO reads one way and
headrace read another (a key dropped, a section shadowed, a size misread), or one DLIO
refuses that ran here without a word, or one DLIO runs that was refused here.

All are parsing-level: ``dlio_workload`` only, no data written, no run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from headrace.bench._dlio import _image_side, dlio_workload
from headrace.errors import ConfigError


def _yaml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("text", "key", "line"),
    [
        # a section given twice: PyYAML kept the last, and the first one's batch_size 4
        # and computation_time ran as batch 1 and no compute, without a word
        (
            "dataset: {format: npz}\nreader:\n  batch_size: 4\ntrain:\n  computation_time: 0.5\n"
            "reader:\n  read_threads: 2\n",
            "reader",
            6,
        ),
        # a key given twice inside a section: the second silently won
        (
            "dataset:\n  format: npz\n  num_files_train: 64\n  num_files_train: 16\n",
            "num_files_train",
            4,
        ),
    ],
)
def test_a_key_given_twice_is_refused_as_dlio_refuses_it(
    text: str, key: str, line: int, tmp_path: Path
) -> None:
    # DLIO reads its YAML through OmegaConf, whose loader refuses a duplicate key
    # ("found duplicate key"): the run never starts. Here the last one won.
    path = _yaml(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        dlio_workload(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: ") and f"{key!r} is given twice" in msg, msg
    assert f"line {line}" in msg and "DLIO (OmegaConf) refuses" in msg, msg
    assert "\n" not in msg
    # the same key in two different sections is no duplicate
    ok = "dataset: {format: npz}\nreader: {seed: 1}\ntrain: {seed: 2}\n"
    assert dlio_workload(_yaml(tmp_path, ok)).train.seed == 2


def test_data_reader_is_read_before_reader_as_dlio_reads_it(tmp_path: Path) -> None:
    # DLIO's LoadConfig takes data_reader where both are given, and ignores reader whole;
    # here reader won (batch 4 where DLIO runs 8) and neither was said.
    text = "dataset: {format: npz, num_files_train: 16}\n"
    text += "reader: {batch_size: 4, read_threads: 3}\ndata_reader: {batch_size: 8}\n"
    wl = dlio_workload(_yaml(tmp_path, text))
    assert wl.train.batch_size == 8 and wl.reader["decode_threads"] == 1
    assert wl.train.steps == 2
    unknown = wl.description.partition("keys DLIO does not read (ignored, as DLIO ignores them): ")
    assert "reader (DLIO reads data_reader where both are given)" in unknown[2], wl.description
    assert "not modelled: reader." not in wl.description
    # a bad value is named in the section it was read from
    bad = "dataset: {format: npz}\nreader: {batch_size: 4}\ndata_reader: {batch_size: 0}\n"
    path = _yaml(tmp_path, bad)
    with pytest.raises(ConfigError, match=r"w\.yaml: data_reader\.batch_size must be a whole"):
        dlio_workload(path)


def test_record_dims_with_a_record_stdev_is_refused_as_dlio_refuses_it(tmp_path: Path) -> None:
    # DLIO's validate(): "Both record_dims and record_length_bytes_stdev are set. This is
    # not supported." Here the records of record_dims were given the stdev anyway.
    text = "dataset: {format: npy, record_dims: [64, 64], record_length_bytes_stdev: 1000}\n"
    path = _yaml(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        dlio_workload(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: dataset.record_dims [64, 64] with ")
    assert "record_length_bytes_stdev 1000" in msg and "DLIO refuses" in msg
    assert "record_length_bytes" in msg.partition("give ")[2]
    # a stdev of 0 is no stdev: DLIO runs it, and so does headrace
    text = "dataset: {format: npy, record_dims: [64, 64], record_length_bytes_stdev: 0}\n"
    assert dlio_workload(_yaml(tmp_path, text)).dataset["record_bytes"] == 64 * 64


def test_an_image_record_is_uint8_whatever_record_element_type_says(tmp_path: Path) -> None:
    # DLIO resets record_element_type to uint8 for jpeg/png (a warning): a 224 x 224 record
    # is 50,176 B. Here float32 made it 4x that, and the images twice the side.
    text = "dataset: {format: png, record_dims: [224, 224], record_element_type: float32}\n"
    wl = dlio_workload(_yaml(tmp_path, text))
    side = _image_side("png", 224 * 224)
    assert wl.dataset["image_hw"] == [side, side]
    assert "record_element_type float32 read as uint8" in wl.description


def test_image_record_dims_of_more_than_two_are_refused_as_dlio_refuses_them(
    tmp_path: Path,
) -> None:
    # DLIO's validate(): "jpeg format does not support more than 2 dimensions"
    text = "dataset: {format: jpeg, record_dims: [224, 224, 3]}\n"
    path = _yaml(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        dlio_workload(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: dataset.record_dims [224, 224, 3] with format 'jpeg'")
    assert "at most 2" in msg and "[224, 224]" in msg.partition("give ")[2]


@pytest.mark.parametrize(
    ("model", "name"),
    [
        # DLIO's model.name is a label; a hub-style name was refused here with a message
        # about a TOML key ('name = "unet3d-small"') the YAML does not have
        ("meta-llama/Llama-2-7b", "meta-llama_Llama-2-7b"),
        ("..", "w"),
        ("../../x", ".._.._x"),
    ],
)
def test_a_model_name_with_a_slash_runs_as_dlio_runs_it(
    model: str, name: str, tmp_path: Path
) -> None:
    text = f"model: {{name: '{model}'}}\ndataset: {{format: npz}}\n"
    wl = dlio_workload(_yaml(tmp_path, text))
    assert wl.name == name
    assert "/" not in wl.name and wl.name.strip(".")


def test_a_storage_root_given_as_a_url_is_refused_naming_the_bucket(tmp_path: Path) -> None:
    # DLIO's storage_root is the bucket's name (s3torchconnector's bucket argument); as a
    # URL it read here as s3://s3://mybucket/unet3d: bucket "s3:", found only at run time.
    text = "dataset: {format: npz, data_folder: unet3d}\n"
    text += "storage: {storage_type: s3, storage_root: 's3://mybucket/'}\n"
    path = _yaml(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        dlio_workload(path)
    assert str(info.value) == (
        f"{path}: storage.storage_root 's3://mybucket/' is a URL: DLIO takes the bucket's "
        "name there; give storage_root: mybucket (the data_folder is the prefix in it)"
    )
    text = text.replace("'s3://mybucket/'", "mybucket")
    assert dlio_workload(_yaml(tmp_path, text)).reader["storage_url"] == "s3://mybucket/unet3d"


@pytest.mark.parametrize(
    ("workflow", "named", "unknown"),
    [
        # DLIO's do_checkpoint and do_eval default to off: a section without the switch
        # is inert, and was named "not modelled" as if DLIO checkpointed
        ("", [], []),
        ("workflow: {train: true}\n", [], []),
        ("workflow: {checkpoint: true}\n", ["checkpoint", "workflow.checkpoint"], []),
        # a switch DLIO does not read (dlrm.yaml's do_eval) turns nothing on, as in DLIO
        (
            "workflow: {do_eval: true}\n",
            [],
            ["workflow.do_eval (did you mean evaluation?)"],
        ),
    ],
)
def test_a_checkpoint_or_evaluation_section_is_named_only_where_workflow_turns_it_on(
    workflow: str, named: list[str], unknown: list[str], tmp_path: Path
) -> None:
    text = "dataset: {format: npz}\ncheckpoint: {checkpoint_folder: c}\n"
    text += "evaluation: {eval_time: 1.0}\n" + workflow
    wl = dlio_workload(_yaml(tmp_path, text))
    head, _, said = wl.description.partition(
        "; keys DLIO does not read (ignored, as DLIO ignores them): "
    )
    ignored = head.partition("; not modelled: ")[2]
    assert (ignored.split(", ") if ignored else []) == named, wl.description
    assert (said.split(", ") if said else []) == unknown, wl.description


@pytest.mark.parametrize(
    ("reader", "prefetch", "note"),
    [
        # DLIO's pytorch loader: DataLoader(num_workers=read_threads, prefetch_factor=
        # ceil(prefetch_size / read_threads)), so torch queues workers x factor batches;
        # read as prefetch_size, UNet3D (4 threads, DLIO's default 2) queued 2, not 4
        ("{data_loader: pytorch, read_threads: 4}", 4, "ceil(2 / 4) = 1 per read thread"),
        ("{data_loader: pytorch, read_threads: 4, prefetch_size: 6}", 8, "ceil(6 / 4) = 2"),
        ("{data_loader: pytorch, read_threads: 2, prefetch_size: 8}", 8, ""),
        # prefetch_size 0: DLIO's pytorch loader sets a factor of 2 per worker
        ("{data_loader: pytorch, read_threads: 3, prefetch_size: 0}", 6, ": 2 (prefetch_size 0)"),
        ("{data_loader: pytorch, read_threads: 1}", 2, ""),
        # tf.data's prefetch(prefetch_size) is the whole queue, as DLIO's default loader
        ("{data_loader: tensorflow, read_threads: 4, prefetch_size: 3}", 3, ""),
        ("{read_threads: 8}", 2, ""),
    ],
)
def test_prefetch_is_the_batches_dlio_s_data_loader_queues(
    reader: str, prefetch: int, note: str, tmp_path: Path
) -> None:
    wl = dlio_workload(_yaml(tmp_path, f"dataset: {{format: npz}}\nreader: {reader}\n"))
    assert wl.reader["prefetch"] == prefetch
    if note:
        assert f"prefetch {prefetch} batches (DLIO's pytorch loader" in wl.description
        assert note in wl.description, wl.description
    else:
        assert "prefetch" not in wl.description
