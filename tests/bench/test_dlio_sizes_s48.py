"""``--dlio`` sizes and ``-w`` names a user may give that were refused under another
key's name (or a TOML key the YAML's user never wrote), read as another size without a
word, or ended in an OSError: each case is parsing-level (``dlio_workload``,
``load_workload`` or ``bench --list``), no data written, no run.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from headrace.bench._dlio import BUILTIN_DLIO, dlio_workload, resolve_dlio
from headrace.bench._workload import load_workload
from headrace.errors import ConfigError


def _yaml(tmp_path: Path, text: str) -> str:
    path = tmp_path / "w.yaml"
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("dims", "size"),
    [
        # 2**32 x 2**32 = 2**64: NumPy's int64 product wrapped to 0, refused as
        # "dataset.record_length_bytes must be > 0 (got 0)", a key the YAML does not have
        ("[4294967296, 4294967296]", "18,446,744,073,709,551,616"),
        # (2**32 + 1)**2 wrapped to 8,589,934,593 B: records of 8.6 GB, without a word
        ("[4294967297, 4294967297]", "18,446,744,082,299,486,209"),
        # 1e16 B, past the 2**53 every other size of the YAML is held to
        ("[100000000, 100000000]", "10,000,000,000,000,000"),
    ],
)
def test_record_dims_past_2_53_bytes_are_refused_naming_record_dims(
    dims: str, size: str, tmp_path: Path
) -> None:
    path = _yaml(tmp_path, f"dataset: {{format: npy, record_dims: {dims}}}\n")
    with pytest.raises(ConfigError) as info:
        dlio_workload(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: dataset.record_dims {dims} "), msg
    assert f"{size} B" in msg and "2**53" in msg, msg
    assert "record_length_bytes" not in msg, msg


@pytest.mark.parametrize("kind", ["str", "V", "U"])
def test_a_record_element_type_of_no_bytes_is_refused_naming_it(kind: str, tmp_path: Path) -> None:
    # np.dtype("str").itemsize is 0: the record was 0 B, refused as "dataset.
    # record_length_bytes must be > 0 (got 0)", naming a key the YAML does not set
    path = _yaml(
        tmp_path, f"dataset: {{format: npy, record_dims: [4], record_element_type: {kind}}}\n"
    )
    with pytest.raises(ConfigError) as info:
        dlio_workload(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: dataset.record_element_type {kind!r} ")
    assert "0 bytes" in msg and "uint8, float32" in msg, msg
    assert "record_length_bytes" not in msg


@pytest.mark.parametrize(
    ("dataset", "samples"),
    [
        (
            "num_files_train: 4294967296, num_samples_per_file: 4294967296",
            "18,446,744,073,709,551,616",
        ),
        (
            "num_files_train: 9007199254740992, num_samples_per_file: 1024",
            "9,223,372,036,854,775,808",
        ),
    ],
)
def test_an_epoch_past_2_63_samples_is_refused_naming_the_file_and_dlio_s_keys(
    dataset: str, samples: str, tmp_path: Path
) -> None:
    # Was "train: batch_size x (warmup_steps + trials x steps) = ... give a smaller
    # batch_size, steps or trials": no file, and keys a DLIO YAML does not have.
    path = _yaml(tmp_path, f"dataset: {{format: npz, {dataset}}}\n")
    with pytest.raises(ConfigError) as info:
        dlio_workload(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: "), msg
    assert f"{samples} samples" in msg and "2**63" in msg, msg
    assert "num_files_train" in msg and "num_samples_per_file" in msg, msg
    assert "total_training_steps" in msg and "--scale" in msg, msg
    assert "warmup_steps" not in msg and "trials" not in msg, msg
    # total_training_steps bounds the epoch as in DLIO: then it runs
    text = f"dataset: {{format: npz, {dataset}}}\ntrain: {{total_training_steps: 5}}\n"
    assert dlio_workload(_yaml(tmp_path, text)).train.steps == 5


def test_epochs_of_more_than_2_63_samples_together_are_refused_naming_epochs(
    tmp_path: Path,
) -> None:
    text = "dataset: {format: npz, num_files_train: 1048576}\ntrain: {epochs: 9007199254740992}\n"
    path = _yaml(tmp_path, text)
    with pytest.raises(ConfigError) as info:
        dlio_workload(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: ") and "train.epochs" in msg and "2**63" in msg, msg


def test_a_folder_named_as_a_builtin_workload_does_not_hide_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `headrace bench -w tokens` run where a folder "tokens" lies (a dataset's, say) ended
    # in "[Errno 21] Is a directory: 'tokens'": a folder is no workload file
    monkeypatch.chdir(tmp_path)
    (tmp_path / "tokens").mkdir()
    assert load_workload("tokens").kind == "tokens"
    # a folder of another name is refused as a folder, naming the built-ins
    (tmp_path / "runs").mkdir()
    with pytest.raises(ConfigError) as info:
        load_workload("runs")
    msg = str(info.value)
    assert msg.startswith("workload 'runs': a folder, not a workload file"), msg
    assert "'tokens'" in msg


def _fifo(tmp_path: Path, text: str) -> tuple[str, threading.Thread]:
    """A named pipe that a thread writes ``text`` to: what ``-w <(...)`` gives."""
    path = tmp_path / "pipe"
    os.mkfifo(path)

    def write() -> None:
        with open(path, "w") as f:  # blocks until the reader opens it
            f.write(text)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    return str(path), writer


def test_a_workload_or_dlio_yaml_from_a_pipe_is_read(tmp_path: Path) -> None:
    # --dlio <(sed ... unet3d.yaml) was "--dlio '/dev/fd/63': no such file" (not a regular
    # file); -w <(...) is read as before, while a folder is not
    shipped = Path(BUILTIN_DLIO) / "unet3d_h100.yaml"
    path, writer = _fifo(tmp_path, shipped.read_text())
    assert resolve_dlio(path) == path
    wl = dlio_workload(resolve_dlio(path))
    writer.join(timeout=30)  # read whole above: the writer is done
    assert wl.dataset == dlio_workload(str(shipped)).dataset
    os.unlink(path)
    path, writer = _fifo(
        tmp_path, 'kind = "files"\nvariants = ["headrace"]\n[train]\nbatch_size = 4\n'
    )
    assert load_workload(path).train.batch_size == 4
    writer.join(timeout=30)  # read whole above: the writer is done


def test_storage_local_on_a_dlio_s3_yaml_is_refused_naming_where_it_reads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Was "workload 'unet3d': ['storage_url', 'endpoint'] need storage = 's3' (--storage
    # s3)": --storage local typed, and told to give --storage s3, with no word of why
    from headrace.cli import main

    yaml = Path(__file__).parent.parent / "data" / "dlio" / "unet3d_h100_s3.yaml"
    args = ["bench", "--dlio", str(yaml), "--root", str(tmp_path / "d"), "--list"]
    assert main([*args, "--storage", "local"]) == 2
    err = capsys.readouterr().err
    assert (
        "workload 'unet3d' reads its dataset from s3 ([reader] storage = 's3'); --storage "
        "local reads a local dataset under --root: run it with --storage s3, or give a "
        "workload whose dataset is local" in err
    ), err
    assert "need storage" not in err
    assert not (tmp_path / "d").exists()
    # an S3 YAML that names no bucket (the local emulator's) runs locally as before
    text = "dataset: {format: npz, num_files_train: 4, record_length_bytes: 64}\n"
    bare = tmp_path / "bare.yaml"
    bare.write_text(text + "storage: {storage_type: s3}\n")
    args = ["bench", "--dlio", str(bare), "--root", str(tmp_path / "d"), "--list"]
    assert main([*args, "--storage", "local"]) == 0


@pytest.mark.parametrize(
    ("scales", "said"),
    [
        # were "unet3d_h100.yaml [dataset]: files = 168000000000000000: expected a number,
        # at most 2**53" and "... [dataset]: record_bytes = 146600628000000000000: ...":
        # keys of a TOML file the YAML's user never wrote, and no word of the flag
        (
            {"scale": 1e15},
            "--scale 1e+15 makes the dataset's 168 files (num_files_train) 1.68e+17, past "
            "2**53, the most a count may be here: give a smaller --scale (at most 5.36e+13)",
        ),
        # 168 x 1e308 is infinity: round() of it raised OverflowError
        ({"scale": 1e308}, "--scale 1e+308 makes the dataset's 168 files (num_files_train) inf"),
        (
            {"record_scale": 1e12},
            "--record-scale 1e+12 makes the dataset's 146,600,628 B records 1.47e+20 B, past "
            "2**53, the most a size may be here: give a smaller --record-scale (at most "
            "6.14e+07)",
        ),
    ],
)
def test_scales_past_2_53_are_refused_naming_the_flag(scales: dict[str, float], said: str) -> None:
    path = str(Path(BUILTIN_DLIO) / "unet3d_h100.yaml")
    with pytest.raises(ConfigError) as info:
        dlio_workload(path, **scales)
    msg = str(info.value)
    assert msg.startswith(f"{path}: {said}"), msg
    assert "[dataset]" not in msg and len(msg) < 400, msg


def test_a_workload_file_without_a_batch_size_is_refused_naming_the_key(tmp_path: Path) -> None:
    # Was "w.toml: TrainConfig.__init__() missing 1 required keyword-only argument:
    # 'batch_size'": Python's words for a dataclass, not the file's
    path = tmp_path / "w.toml"
    path.write_text('kind = "files"\nvariants = ["headrace"]\n[train]\nsteps = 4\n')
    with pytest.raises(ConfigError) as info:
        load_workload(str(path))
    msg = str(info.value)
    assert msg == (
        f"{path} [train]: missing batch_size (samples per step; DLIO's reader.batch_size), "
        "e.g. batch_size = 32"
    ), msg


def test_endpoint_url_as_a_yaml_list_is_the_comma_separated_list(tmp_path: Path) -> None:
    # endpoint_url: [http://a:9020, http://b:9021] read as the endpoint "['http://a:9020'":
    # str() of the list split at its comma; a list is DLIO's comma-separated endpoints
    base = "dataset: {format: npz, data_folder: d}\nstorage: {storage_type: s3, "
    base += "storage_root: b, storage_options: {endpoint_url: %s}}\n"
    wl = dlio_workload(_yaml(tmp_path, base % "[http://a:9020, 'http://b:9021']"))
    assert wl.reader["endpoint"] == "http://a:9020"
    assert "endpoint_url: the first of 2 (DLIO's rank 0)" in wl.description
    path = _yaml(tmp_path, base % "{host: a}")
    with pytest.raises(ConfigError) as info:
        dlio_workload(path)
    assert str(info.value) == (
        f"{path}: storage.storage_options.endpoint_url must be a URL, or several comma-"
        "separated or in a list (got {'host': 'a'})"
    )
