"""Every key of a workload is read by someone, or refused with the closest known key."""

from __future__ import annotations

import dataclasses
import re
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from headrace.bench._cli import _plan
from headrace.bench._dlio import BUILTIN_DLIO, dlio_workload
from headrace.bench._files_kind import FilesKind
from headrace.bench._kind import make_kind
from headrace.bench._measure import measure_pass
from headrace.bench._workload import builtin_workloads, load_workload
from headrace.cli import main
from headrace.errors import ConfigError

SHIPPED = Path(BUILTIN_DLIO)  # the DLIO workloads that ship: unet3d_h100, resnet50_h100, ...
BUILTIN = sorted(builtin_workloads())

JPEG = """\
kind = "files"
variants = ["map-style", "headrace"]
[dataset]
format = "jpeg"
files = 4
image_hw = [16, 16]
[reader]
in_flight = 2
[train]
batch_size = 2
"""


def _write(tmp_path: Path, text: str) -> str:
    p = tmp_path / "w.toml"
    p.write_text(text)
    return str(p)


@pytest.mark.parametrize(
    ("old", "new", "match"),
    [
        # top level, and a misspelled table name
        ('variants = ["map-style", "headrace"]', 'variant = ["map-style"]',
         r"w\.toml: unknown key 'variant' \(did you mean 'variants'\?\); a workload file has: "),
        ("[dataset]", "[datset]", r"w\.toml: unknown key 'datset' \(did you mean 'dataset'\?\)"),
        # the audit's workload: a typo in [dataset] and [reader] ran with the defaults
        ("files = 4", "filez = 3",
         r"w\.toml \[dataset\]: unknown key 'filez' \(did you mean 'files'\?\); the files kind "
         r"reads: files, format, image_hw, noise, quality, samples_per_file$"),
        ("in_flight = 2", "in_flght = 3",
         r"w\.toml \[reader\]: unknown key 'in_flght' \(did you mean 'in_flight'\?\); the files "
         r"kind reads: cache_dir, chunk_steps, decode_threads, .*in_flight.*odirect, prefetch"),
        ("batch_size = 2", "batch_size = 2\nstpes = 3",
         r"w\.toml \[train\]: unknown key 'stpes' \(did you mean 'steps'\?\); \[train\] takes: "),
        # two at once, one with nothing close
        ("in_flight = 2", "in_flght = 3\nzzz = 1",
         r"unknown keys 'in_flght' \(did you mean 'in_flight'\?\), 'zzz'; the files kind"),
        # variants as a table of options: refused, not read as variant names
        ('variants = ["map-style", "headrace"]', '[variants.headrace]\nin_flight = 4',
         r"w\.toml: variants must be a list of variant specs"),
    ],
)  # fmt: skip
def test_a_misspelled_key_in_each_section_is_refused_with_the_closest(
    tmp_path: Path, old: str, new: str, match: str
) -> None:
    assert old in JPEG
    path = _write(tmp_path, JPEG.replace(old, new))
    with pytest.raises(ConfigError, match=match):
        make_kind(load_workload(path), str(tmp_path))


def test_the_cli_refuses_before_generating_anything(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, JPEG.replace("in_flight = 2", "in_flght = 3"))
    root = tmp_path / "d"
    for command in (["bench", "-w", path], ["gen", path]):
        assert main([*command, "--root", str(root), "-q"]) == 2
        err = capsys.readouterr().err
        assert "unknown key 'in_flght' (did you mean 'in_flight'?)" in err
        assert "Traceback" not in err
    assert not any(root.rglob("*.jpg"))


def _typo(key: str) -> str:
    return key[:-1]  # "prefetch" -> "prefetc": close to the key, and to no other


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("section", ["dataset", "reader"])
def test_every_kind_refuses_a_typo_of_a_key_it_reads(
    name: str, section: str, tmp_path: Path
) -> None:
    wl = builtin_workloads()[name]
    key = next(iter(getattr(wl, section)))  # a key the built-in file sets
    bad = wl.replace(**{section: {_typo(key): getattr(wl, section)[key]}})
    where = rf"{name}\.toml \[{section}\]"
    match = rf"^{where}: unknown key '{_typo(key)}' \(did you mean '{key}'\?\); the {wl.kind} kind"
    with pytest.raises(ConfigError, match=match):
        make_kind(bad, str(tmp_path))


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_workloads_set_only_keys_their_kind_reads(name: str, tmp_path: Path) -> None:
    folder = resources.files("headrace.bench") / "workloads"
    text = (folder / f"{name}.toml").read_text()
    # the shipped file itself, loaded by path: every section checked
    path = _write(tmp_path, text)
    kind = make_kind(load_workload(path), str(tmp_path))
    raw = tomllib.loads(text)
    for section in ("dataset", "reader"):
        got = getattr(kind.workload, section)
        assert set(raw.get(section, {})) <= got.read, (name, section)


@pytest.mark.parametrize("yaml", ["unet3d_h100.yaml", "resnet50_h100.yaml"])
def test_dlio_yamls_load_with_only_keys_the_kind_reads(yaml: str, tmp_path: Path) -> None:
    kind = make_kind(dlio_workload(str(SHIPPED / yaml), scale=0.01), str(tmp_path))
    assert kind.workload.source == str(SHIPPED / yaml)


@pytest.mark.parametrize(
    ("name", "section", "key", "value", "match"),
    [
        ("tokens", "reader", "odirect", True,
         r"tokens\.toml \[reader\]: the tokens kind does not take 'odirect': its windows are "
         r"filled through the page cache .* files kind \(odirect = true\)"),
        ("megatron", "reader", "style", "windows", r"does not take 'style': it reads one way"),
        ("tokens", "reader", "threads", 8, r"does not take 'threads': .*HEADRACE_IO_THREADS"),
        ("jpeg", "reader", "threads", 8, r"files workloads set in_flight"),
        ("tokens", "reader", "strategy", "pread", r"\?reads=pread"),
        ("tokens", "dataset", "format", "tokens", r"the kind is the layout"),
        ("padded", "reader", "odirect", True, r"set strategy = 'odirect'"),
        ("padded", "dataset", "format", "npy", r"right-padded \.npy rows"),
        ("table", "reader", "odirect", True, r"memory-mapped Arrow file"),
        ("parquet", "reader", "odirect", True, r"not O_DIRECT; the files kind has odirect"),
        ("packed", "reader", "odirect", True, r"positional reads of the column's byte ranges"),
        ("packed", "dataset", "format", "parquet", r"kind = 'parquet' pads rows instead"),
        ("npz", "dataset", "image_hw", [8, 8], r"npz records are arrays of record_bytes"),
        ("jpeg", "dataset", "record_bytes_stdev", 5, r"images are all image_hw in size"),
        ("jpeg", "reader", "strategy", "odirect", r"O_DIRECT with odirect = true"),
        ("jpeg", "reader", "odirect", "yes", r"odirect must be true or false \(got 'yes'\)"),
        ("npz", "reader", "image_mode", "RGB",
         r"npz\.toml \[reader\]: the files kind does not take 'image_mode': npz records are "
         r"arrays; image_mode converts format 'jpeg' or 'png'"),
        ("jpeg", "reader", "image_mode", "rgb",
         r"workload 'jpeg': \[reader\] image_mode must be one of 'L', 'LA', 'RGB', 'RGBA' or "
         r"None .*\(got 'rgb'\) \(Pillow's names are upper case: 'RGB'\)"),
        ("jpeg", "reader", "storage", "s3",
         r"odirect = true reads local files past the page cache; with storage = 's3'"),
    ],
)  # fmt: skip
def test_settings_a_kind_does_not_have_are_refused_with_what_it_has(
    name: str, section: str, key: str, value: Any, match: str, tmp_path: Path
) -> None:
    wl = builtin_workloads()[name].replace(**{section: {key: value}})
    if key == "storage":
        wl = wl.replace(reader={"odirect": True})
    with pytest.raises(ConfigError, match=match):
        make_kind(wl, str(tmp_path))


def test_png_refuses_quality(tmp_path: Path) -> None:
    # jpeg.toml sets quality = 90: the same file with format = "png" is refused
    wl = builtin_workloads()["jpeg"].replace(dataset={"format": "png"})
    with pytest.raises(ConfigError, match=r"jpeg\.toml \[dataset\]: .*'quality': PNG is lossless"):
        make_kind(wl, str(tmp_path))
    png = dataclasses.replace(wl, dataset={"format": "png", "image_hw": [8, 8], "noise": 4})
    kind = make_kind(png, str(tmp_path))
    # one image encoded, before any is written (it was record_bytes' 300_000, a guess)
    assert kind.record_bytes() == len(kind._file_bytes(0)) < 1000


def test_images_refuse_record_bytes(tmp_path: Path) -> None:
    # record_bytes was an image's "expected stored size", for the demand printed before
    # generating, and nothing else: record_bytes = 100 printed 400.0 kB/s for 1.2 MB PNGs
    # (fails before: accepted).
    wl = builtin_workloads()["jpeg"].replace(dataset={"record_bytes": 100})
    with pytest.raises(ConfigError, match=r"does not take 'record_bytes': an image's stored"):
        make_kind(wl, str(tmp_path))


def test_a_misspelled_variant_option_is_refused_with_the_closest(tmp_path: Path) -> None:
    wl = builtin_workloads()["tokens"].replace(dataset={"token_file_gib": 0.002})
    kind = make_kind(wl, str(tmp_path))
    with pytest.raises(
        ConfigError,
        match=r"tokens\.toml: variant 'naive\?sede=1': unknown option 'sede' "
        r"\(did you mean 'seed'\?\); nothing reads it",
    ):
        kind.open("naive?sede=1", 1)


def test_files_odirect_reads_with_o_direct_and_the_same_batches(tmp_path: Path) -> None:
    wl = builtin_workloads()["npz"].replace(
        dataset={"files": 8, "record_bytes": 3_000, "record_bytes_stdev": 1_000},
        train={"batch_size": 4, "steps": 2, "trials": 1, "warmup_steps": 1},
    )
    plain = make_kind(wl, str(tmp_path))
    plain.generate()
    direct = make_kind(wl.replace(reader={"odirect": True}), str(tmp_path))
    assert direct.source().config.local_read == "odirect"
    assert plain.source().config.local_read == "pread"
    for spec in wl.variants:  # map-style, iterable, headrace, headrace-raw, ceiling
        a, b = measure_pass(plain, spec, 4), measure_pass(direct, spec, 4)
        assert b["canonical_digest"] == a["canonical_digest"], spec
        if plain.digest_rule(spec)[1] == "plan":  # others hand over in completion order
            assert b["digest"] == a["digest"], spec
        assert b["bytes_read"] > 0, spec  # how far read-ahead got varies: not compared


def test_a_variant_option_may_set_a_reader_key_the_file_leaves_at_its_default(
    tmp_path: Path,
) -> None:
    # npz.toml sets no odirect: ?odirect=true (what --sweep odirect=false,true makes)
    # still reaches it, parsed like the kind's default (a bool), same batches.
    wl = builtin_workloads()["npz"].replace(
        dataset={"files": 8, "record_bytes": 3_000, "record_bytes_stdev": 1_000},
        train={"batch_size": 4, "steps": 2, "trials": 1, "warmup_steps": 1},
    )
    assert "odirect" not in dict(wl.reader)
    kind = make_kind(wl, str(tmp_path))
    kind.generate()
    plain, direct = (
        measure_pass(kind, "headrace", 4),
        measure_pass(kind, "headrace?odirect=true", 4),
    )
    assert direct["digest"] == plain["digest"]
    # It said "'ture' is not a bool like the reader's False": the type, not what to give.
    with pytest.raises(
        ConfigError,
        match=r"odirect='ture' is not true or false, as the reader's odirect is \(False\); "
        r"give one, e.g. odirect=false",
    ):
        measure_pass(kind, "headrace?odirect=ture", 4)
    with pytest.raises(ConfigError, match=r"option 'odirekt' \(did you mean 'odirect'\?\)"):
        measure_pass(kind, "headrace?odirekt=true", 4)


def _dlio(tmp_path: Path, yaml: str, **edits: str) -> str:
    text = (SHIPPED / yaml).read_text()
    for old, new in edits.items():
        assert old in text
        text = text.replace(old, new)
    (tmp_path / yaml).write_text(text)
    return str(tmp_path / yaml)


def test_dlio_epochs_are_trials_of_one_epoch_of_the_scaled_dataset(tmp_path: Path) -> None:
    # resnet50: 1,024 files x 1,251 samples, batch 400, 5 epochs. DLIO: an epoch is
    # floor(files x samples / batch) steps; --scale shrinks the files, so the epoch too.
    for scale, files in ((0.5, 512), (0.01, 10)):
        wl = dlio_workload(str(SHIPPED / "resnet50_h100.yaml"), scale=scale)
        assert wl.dataset["files"] == files
        assert wl.train.steps == files * 1251 // 400  # 1,601 and 31
        assert wl.train.trials == 5
        assert f"5 epochs of {files * 1251 // 400:,} steps" in wl.description
    one = dlio_workload(_dlio(tmp_path, "unet3d_h100.yaml", **{"  epochs: 5\n": ""}))
    assert one.train.trials == 1 and one.train.steps == 168 // 7  # DLIO's default: 1 epoch
    # total_training_steps stops each epoch early, scaled like the epoch it is part of
    capped = _dlio(
        tmp_path, "resnet50_h100.yaml", **{"epochs: 5": "epochs: 2\n  total_training_steps: 100"}
    )
    wl = dlio_workload(capped, scale=0.5)
    assert (wl.train.trials, wl.train.steps) == (2, 50)
    assert "total_training_steps 100 x0.5; an epoch has 1,601" in wl.description
    assert dlio_workload(capped, scale=0.01).train.steps == 1  # round(100 x 0.01)
    unlimited = _dlio(  # DLIO's default, written out: no limit
        tmp_path, "resnet50_h100.yaml", **{"epochs: 5": "epochs: 2\n  total_training_steps: -1"}
    )
    assert dlio_workload(unlimited, scale=0.5).train.steps == wl.dataset["files"] * 1251 // 400
    bad = _dlio(tmp_path, "unet3d_h100.yaml", **{"epochs: 5": "epochs: 0"})
    with pytest.raises(ConfigError, match=r"train\.epochs must be a whole number >= 1 \(got 0\)"):
        dlio_workload(bad)


def test_dlio_plan_says_where_its_steps_come_from() -> None:
    wl = dlio_workload(str(SHIPPED / "resnet50_h100.yaml"), scale=0.001, record_scale=0.01)
    plan = _plan(wl)
    assert plan.startswith("plan: 3 warm-up steps (an untimed epoch, so that the first trial ")
    assert (
        "then 5 trials x 3 steps per variant, and 18 steps with compute (1 warm-up epoch and "
        in plan
    )
    assert "(DLIO resnet50_h100.yaml: 5 epochs of 3 steps" in plan
    tokens = _plan(builtin_workloads()["tokens"])
    assert tokens == "plan: 200 warm-up steps, then 5 trials x 1,000 steps per variant"


def test_dlio_odirect_and_compute_distribution(tmp_path: Path) -> None:
    path = _dlio(
        tmp_path,
        "unet3d_h100.yaml",
        **{
            "  sample_shuffle: seed\n": "  sample_shuffle: seed\n  odirect: true\n",
            "computation_time: 0.323": "computation_time:\n    mean: 0.3\n    stdev: 0.05",
        },
    )
    wl = dlio_workload(path, scale=0.05, record_scale=0.5)
    assert wl.reader["odirect"] is True
    kind = make_kind(wl, str(tmp_path))
    assert isinstance(kind, FilesKind) and kind.odirect
    assert wl.train.computation_time == pytest.approx(0.15)
    assert wl.train.computation_time_stdev == pytest.approx(0.025)
    assert "odirect" not in dlio_workload(str(SHIPPED / "unet3d_h100.yaml")).reader
    gamma = "computation_time:\n    shape: 1.0\n    type: gamma"
    gamma = _dlio(tmp_path, "unet3d_h100.yaml", **{"computation_time: 0.323": gamma})
    with pytest.raises(ConfigError, match=r"only a number or a normal distribution"):
        dlio_workload(gamma)
    prep = "prefetch_size: 2\n  preprocess_time:\n    type: uniform\n    mean: 1"
    prep = _dlio(tmp_path, "resnet50_h100.yaml", **{"prefetch_size: 2": prep})
    with pytest.raises(ConfigError, match=r"reader\.preprocess_time .*only a number or a normal"):
        dlio_workload(prep)


def test_the_docs_table_of_keys_is_what_the_kinds_read(tmp_path: Path) -> None:
    docs = Path(__file__).parent.parent.parent / "docs" / "bench.md"
    text = docs.read_text()
    table = text[text.index("| kind | `[dataset]` | `[reader]` |") :].split("\n\n")[0]
    rows = {}
    for line in table.splitlines()[2:]:
        kind, *cells = (c.strip() for c in line.strip().strip("|").split("|"))
        rows[kind] = tuple({k.strip() for k in re.split("[,;]", c)} for c in cells)
    read: dict[str, tuple[set[str], set[str]]] = {}
    for wl in builtin_workloads().values():  # every kind has a built-in workload
        kind = make_kind(wl, str(tmp_path))
        ds, rd = read.setdefault(wl.kind, (set(), set()))
        ds |= kind.workload.dataset.read  # type: ignore[attr-defined]
        rd |= kind.workload.reader.read  # type: ignore[attr-defined]
    assert rows == read


def test_dlio_keys_not_modelled_are_named_in_the_plan(tmp_path: Path) -> None:
    # A checkpoint section that workflow turns on changes what DLIO measures; the mapping
    # does not model it, so the plan says so. preprocess_time (simulated per-sample work)
    # is modelled. (Without workflow.checkpoint, DLIO's default is off: nothing to name.)
    text = (SHIPPED / "resnet50_h100.yaml").read_text()
    text = text.replace("  prefetch_size: 2", "  prefetch_size: 2\n  preprocess_time: 0.01")
    text = text.replace("  train: True\n", "  train: True\n  checkpoint: True\n", 1)
    (tmp_path / "r.yaml").write_text(text + "checkpoint:\n  checkpoint_folder: ckpt\n")
    wl = dlio_workload(str(tmp_path / "r.yaml"), scale=0.01)
    plan = _plan(wl)
    assert (
        "not modelled: checkpoint, reader.computation_threads, reader.data_loader, "
        "workflow.checkpoint)" in plan
    )
    for read in (
        "batch_size",
        "read_threads",
        "epochs",
        "computation_time",
        "framework",
        "preprocess_time",
    ):
        assert read not in plan.split("not modelled:")[1]
    assert wl.reader["preprocess_time"] == pytest.approx(0.01)


def test_preprocess_time_is_slept_per_decoded_sample(tmp_path: Path) -> None:
    # 2 files x 3 samples, 20 ms each, one decoding thread: >= 120 ms in decode_s
    # for every decoding variant; the raw variants and the ceiling sleep nothing.
    wl = builtin_workloads()["npz"].replace(
        dataset={"files": 2, "samples_per_file": 3, "record_bytes": 4096},
        reader={"decode_threads": 1, "preprocess_time": 0.02, "in_flight": 2},
        train={"batch_size": 3, "steps": 2, "trials": 1, "warmup_steps": 0},
    )
    kind = make_kind(wl, str(tmp_path))
    assert isinstance(kind, FilesKind) and kind.preprocess == (0.02, 0.0)
    kind.generate()
    for variant in ("headrace", "map-style", "iterable"):
        m = measure_pass(kind, variant, 2)
        assert m["source"]["decode_s"] >= 6 * 0.02 * 0.95, variant
    with pytest.raises(ConfigError, match="preprocess_time and preprocess_time_stdev must"):
        make_kind(wl.replace(reader={"preprocess_time": -1}), str(tmp_path))


def test_variant_specs_and_kinds_that_do_not_parse() -> None:
    from headrace.bench._kind import VariantSpec, kind_class

    with pytest.raises(
        ConfigError, match=r"variant 'headrace\?in_flight': option 'in_flight' is not key=value"
    ):
        VariantSpec.parse("headrace?in_flight")
    spec = VariantSpec.parse("headrace?in_flight=many")
    with pytest.raises(
        ConfigError, match=r"variant 'headrace\?in_flight=many': in_flight='many' is not an integer"
    ):
        spec.int("in_flight", 8)
    with pytest.raises(ConfigError, match=r"unknown workload kind 'video'; known: \['files'"):
        kind_class("video")


@pytest.mark.parametrize("name", BUILTIN)
@pytest.mark.parametrize("section", ["dataset", "reader"])
def test_a_value_of_the_wrong_type_is_refused_naming_its_key(
    name: str, section: str, tmp_path: Path
) -> None:
    # files = "x" met the kind's int() as a bare "invalid literal for int()", and
    # dtype = "float77" np.dtype()'s TypeError as a traceback.
    wl = builtin_workloads()[name]
    for key, value in getattr(wl, section).items():
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            continue
        bad = "float77" if isinstance(value, str) else "x"
        if isinstance(value, str) and key != "dtype":
            continue  # other strings are names (formats, layouts), each checked by its kind
        wrong = wl.replace(**{section: {**getattr(wl, section), key: bad}})
        where = rf"{name}\.toml \[{section}\]"
        # A number's own check (Section) says so once; a conversion's error is wrapped.
        said = rf"( = '{bad}' cannot be used: | must be a (whole )?number.*got '{bad}'$)"
        with pytest.raises(ConfigError, match=rf"^{where}: {key}{said}"):
            make_kind(wrong, str(tmp_path))


@pytest.mark.parametrize("command", ["bench", "gen"])
def test_the_cli_says_which_value_it_cannot_use(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    text = (resources.files("headrace.bench") / "workloads" / "tokens.toml").read_text()
    assert 'dtype = "uint32"' in text
    path = _write(tmp_path, text.replace('dtype = "uint32"', 'dtype = "float77"'))
    workload = ["-w", path] if command == "bench" else [path]
    assert main([command, *workload, "--root", str(tmp_path / "d"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "w.toml [dataset]: dtype = 'float77' cannot be used: " in err
    assert "Traceback" not in err


@pytest.mark.parametrize("seed", [-1, 2**63])
def test_a_train_seed_out_of_range_is_refused_when_the_file_is_read(
    tmp_path: Path, seed: int
) -> None:
    # seed = -1 ran the warm-up, then failed inside NumPy's SeedSequence with a traceback.
    path = _write(tmp_path, JPEG.replace("batch_size = 2", f"batch_size = 2\nseed = {seed}"))
    with pytest.raises(ConfigError, match=rf"train: seed must be in \[0, 2\*\*63\) \(got {seed}\)"):
        load_workload(path)


def test_plan_counts_the_warm_up_step_every_run_takes() -> None:
    # --warmup 0 printed "0 warm-up steps", yet the runner always takes the first batch
    # untimed (it is the time to first batch): the plan named one step fewer than ran.
    wl = builtin_workloads()["tokens"]
    cold = dataclasses.replace(wl, train=dataclasses.replace(wl.train, warmup_steps=0))
    assert _plan(cold).startswith(
        "plan: 1 warm-up step (the first batch, timed apart as time to first batch; "
        "--warmup 0 takes it too), then 5 trials x 1,000 steps per variant"
    )


@pytest.mark.parametrize(
    ("workload", "key", "value", "least"),
    [
        ("npz", "in_flight", "-1", 1),
        ("npz", "in_flight", "0", 1),
        ("npz", "in_flight", "1.5", 1),  # int() read it as 1
        ("npz", "decode_threads", "-1", 0),
        ("npz", "prefetch", "-1", 0),
        ("npz", "chunk_steps", "0", 1),
        ("parquet", "in_flight", "-1", 1),
        ("table", "prefetch", "-1", 0),
        ("tokens", "prefetch", "-1", 0),
        ("packed", "prefetch", "-1", 0),
        ("padded", "prefetch", "-1", 0),
        ("hub-images", "decode_threads", "-1", 0),
    ],
)
def test_reader_counts_out_of_range_are_refused_before_any_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], workload: str, key: str, value: str,
    least: int,
) -> None:  # fmt: skip
    # `in_flight = -1` in a workload file passed `bench --list`; a run generated the
    # whole dataset and then refused it in the reader, naming neither file nor key.
    text = (resources.files("headrace.bench") / "workloads" / f"{workload}.toml").read_text()
    text = re.sub(rf"(?m)^{key} = .*\n", "", text).replace(
        "[reader]\n", f"[reader]\n{key} = {value}\n"
    )
    path = tmp_path / "w.toml"
    path.write_text(text)
    line = f"headrace bench: {path} [reader]: {key} must be a whole number >= {least}; got {value}"
    root = tmp_path / "root"
    for argv in (["--list"], ["--root", str(root), "--quiet", "--no-isolate"]):
        capsys.readouterr()
        assert main(["bench", *argv, "-w", str(path)]) == 2
        assert capsys.readouterr().err.strip().splitlines() == [line]
    assert not root.exists() or not any(root.iterdir())  # nothing generated
