"""``headrace gen WORKLOAD --root DIR|URL``: write a workload's dataset, resumably.

A local ``--root`` gets the files. An object-store URL (``s3://bucket/prefix``,
``gs://``, ``az://``, ``http(s)://``, ``file://``) gets them as objects under
the prefix, keyed by their paths under a local root: they are generated into a
local copy first (``--staging``, by default the bench cache, so a later local
bench run reuses them), then uploaded, keeping objects that are there with the
right size and digest (:mod:`headrace.bench._upload`). ``--endpoint`` and
credentials work as for ``headrace bench --storage s3``.
"""

from __future__ import annotations

import argparse
import errno
import os
import posixpath
import sys
from contextlib import ExitStack
from typing import Any
from urllib.parse import unquote, urlsplit

from headrace._store_option import add_store_option, store_options
from headrace.bench._args import (
    check_ranges,
    refuse_scales_without_dlio,
    refuse_unused_sizes,
    size_changes,
)
from headrace.bench._cli import (
    _progress,
    _refuse_empty,
    default_root,
    prepare_root,
    refuse_url_typo,
    url_scheme,
)
from headrace.bench._kind import Kind, make_kind
from headrace.bench._overrides import S3_KINDS, dlio_from_args
from headrace.bench._upload import DigestCache, Uploaded, list_destination, upload_files
from headrace.bench._workload import Workload, load_workload
from headrace.errors import ConfigError, HeadraceError

__all__ = ["WRITABLE_SCHEMES", "check", "configure", "run"]

#: The object stores other than S3 that ``--endpoint`` and ``--store-option`` reach.
CLOUD_SCHEMES = ("gs", "az", "azure", "abfs", "abfss", "adl")

#: URL schemes ``--root`` may name (obstore writes to them).
WRITABLE_SCHEMES = ("s3", "s3a", "gs", "az", "azure", "abfs", "abfss", "adl", "http", "https",
                    "file")  # fmt: skip


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "workload", nargs="?", help="built-in workload name or TOML path (or --dlio YAML)"
    )
    parser.add_argument("--dlio", metavar="YAML", help="a DLIO workload YAML's dataset")
    parser.add_argument("--scale", type=float, help="DLIO: multiply file count (default 1)")
    parser.add_argument(
        "--record-scale", type=float, help="DLIO: multiply record sizes (default 1)"
    )
    parser.add_argument(
        "--root",
        default=None,
        metavar="DIR|URL",
        help=f"dataset folder, or an object-store URL such as s3://bucket/prefix to upload to "
        f"(default: {default_root()})",
    )
    parser.add_argument(
        "--staging",
        metavar="DIR",
        help=f"with --root URL: where the files are generated before upload "
        f"(default: {default_root()})",
    )
    parser.add_argument(
        "--endpoint",
        metavar="URL",
        help="with --root s3://...: an S3-compatible endpoint (MinIO, moto ...), credentials "
        "from AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_REGION; with gs:// or az://: "
        "the store's endpoint (fake-gcs-server, Azurite, a private endpoint)",
    )
    add_store_option(parser)
    # As headrace bench takes them, so that gen writes the dataset such a run reads.
    parser.add_argument(
        "--token-file-gib", type=float, help="tokens, megatron: token file size in GiB"
    )
    parser.add_argument("--files", type=int, help="jpeg, npz, hdf5, parquet: how many files")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="also compare every file with a fresh copy written beside it and replace those "
        "that differ (a file changed in place at its size; a rerun alone rewrites only "
        "missing files and files of another size): as slow as writing the dataset, and "
        "needs room for a second copy",
    )
    parser.add_argument("--quiet", "-q", action="store_true")


def _destination(
    root: str, scheme: str, wl: Workload, endpoint: str | None, given: list[str]
) -> Any:
    """The ObjectStore for ``root``: the workload's store options, ``--store-option``
    over them, and ``--endpoint`` (S3's with the AWS_* credentials; a gs:// or az://
    store's as its own endpoint, credentials from its own settings)."""
    from headrace.bench._s3_serve import endpoint_info
    from headrace.formats._object_files import check_store_options
    from headrace.io import ObjectStore

    where = f"workload {wl.name!r} [reader] store_options"
    options = dict(check_store_options(wl.reader.get("store_options"), remote=True, where=where))
    for key, value in store_options(given).items():
        # config.X=... adds to the workload's config, as a flag does to a file's setting
        options[key] = {**options.get(key, {}), **value} if isinstance(value, dict) else value
    endpoint = endpoint or wl.reader.get("endpoint")
    if endpoint:
        if not str(endpoint).startswith(("http://", "https://")):
            raise ConfigError(f"--endpoint must be an http(s):// URL (got {endpoint!r})")
        if scheme in ("s3", "s3a"):
            options = {**endpoint_info(str(endpoint)).store_options(), **options}
        options["endpoint"] = str(endpoint)
    if scheme == "file":
        path = unquote(urlsplit(root).path)
        try:
            os.makedirs(path, exist_ok=True)
        except OSError as exc:
            raise ConfigError(
                f"--root {root!r}: cannot create the folder {path!r} ({exc.strerror})"
            ) from None
    return ObjectStore(root, **options)


def _keys(kind: Kind, paths: list[str]) -> list[str]:
    """Each file's key: its path under the local root, with '/' between folders."""
    root = os.path.abspath(kind.root)
    keys = []
    for p in paths:
        rel = os.path.relpath(os.path.abspath(p), root)
        if rel.startswith(os.pardir):
            raise AssertionError(f"{p} lies outside the dataset root {root}")
        keys.append(rel.replace(os.sep, "/"))
    return keys


def _bench_hint(
    root: str, scheme: str, keys: list[str], endpoint: str | None, kind: str, args: Any
) -> str:
    """How ``headrace bench`` reads back what went to an ``s3://`` root: at the folder
    the keys share under the prefix (a files dataset's), else at the prefix (a token
    file). Its name was nowhere in the output: a run at the prefix was refused, as it
    holds objects that are not the workload's dataset at that level.

    With gen's size flags (``--files``, ``--token-file-gib``, ``--dlio`` and its scales):
    a bench without them reads the default dataset, which it wrote and uploaded beside
    gen's (a 1 GiB token file beside a 0.0005 GiB one; 512 JPEGs into the folder of
    gen's 2). None for a kind bench reads locally only (it refuses ``--storage s3``)."""
    if scheme not in ("s3", "s3a", *CLOUD_SCHEMES) or kind not in S3_KINDS:
        return ""  # bench reads object stores of these schemes only, and these kinds only
    folders = {k.rpartition("/")[0] for k in keys}
    sub = posixpath.commonpath(sorted(folders)) if all(folders) else ""
    url = root.rstrip("/") + (f"/{sub}" if sub else "")
    sizes = "".join(
        f"{flag} {value} "
        for flag, value in (
            ("--dlio", args.dlio),
            ("--scale", args.scale),
            ("--record-scale", args.record_scale),
            ("--files", args.files),
            ("--token-file-gib", args.token_file_gib),
        )
        if value is not None
    )
    # (--store-option values not repeated: they may hold a key)
    given = " and the same --store-option flags" if args.store_option else ""
    return (
        f"; bench it with {sizes}--storage s3 --storage-url {url}"
        + (f" --endpoint {endpoint}" if endpoint else "")
        + given
    )


def _os_error(exc: OSError, writing: str) -> str:
    """An OSError from writing the dataset, naming where: a write or fsync error
    carries no file name ('[Errno 28] No space left on device' alone). A full
    filesystem's says how much room there is."""
    if exc.filename:
        text = f"{exc.filename}: {exc.strerror or exc}"
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            return text
    else:
        text = f"writing the dataset under {writing} failed: {exc.strerror or exc}"
    try:
        st = os.statvfs(writing)
    except OSError:
        return text
    free = st.f_bavail * st.f_frsize
    return f"{text} ({free:,} bytes free there)"


def check(args: argparse.Namespace) -> Workload:
    """What :func:`run` refuses before it writes or connects: the workload (a built-in
    name, or a TOML file, read), and flags that do not go with ``--root``."""
    # `--root "$DATA"`, DATA unset: the dataset went to the default root, as bench's did.
    _refuse_empty(args)
    if args.staging == "":
        raise ConfigError(
            "--staging '' is empty (an unset shell variable?): give a value, or leave "
            f"--staging out (default: {default_root()})"
        )
    root = args.root or default_root()
    scheme = url_scheme(root)
    check_ranges(args)
    refuse_scales_without_dlio(args)
    if args.dlio and args.workload:
        raise ConfigError(
            f"got {args.workload!r} and --dlio {args.dlio!r}: name a workload or --dlio YAML, "
            "not both"
        )
    if not args.dlio and not args.workload:
        raise ConfigError(
            "name a workload or --dlio YAML, e.g. headrace gen jpeg, or headrace gen --dlio "
            "unet3d_h100.yaml --scale 0.01 (headrace bench --list shows the workloads)"
        )
    wl = dlio_from_args(args) if args.dlio else load_workload(args.workload)
    refuse_unused_sizes([wl], args)
    sizes = size_changes(wl, args)
    if sizes:
        wl = wl.replace(dataset=sizes)
    if scheme is None and (args.staging or args.endpoint or args.store_option):
        raise ConfigError(
            "--staging, --endpoint and --store-option go with --root URL (an object store, "
            f"e.g. --root s3://bucket/prefix); --root {root!r} is a local folder"
        )
    store_options(args.store_option)  # (one that cannot be read: refused before any work)
    if args.endpoint and scheme is not None and scheme not in ("s3", "s3a", *CLOUD_SCHEMES):
        raise ConfigError(
            f"--endpoint {args.endpoint!r}: --root {root!r} is a {scheme}:// URL, whose "
            "address is the URL itself; --endpoint goes with s3://, gs:// and az:// roots"
        )
    if scheme is None:
        refuse_url_typo("--root", root, "--root")
    if args.staging:
        refuse_url_typo("--staging", args.staging)
    if scheme is not None and scheme not in WRITABLE_SCHEMES:
        raise ConfigError(
            f"--root {root!r}: cannot write to {scheme}:// URLs; use a local folder or one "
            f"of {', '.join(s + '://' for s in WRITABLE_SCHEMES)}"
        )
    make_kind(wl, root if scheme is None else args.staging or default_root())
    return wl


def run(args: argparse.Namespace) -> int:
    root = args.root or default_root()
    scheme = url_scheme(root)
    uploaded: Uploaded | None = None
    hint = verified = ""
    writing = root  # where files are being written, for errors that do not say
    try:
        with ExitStack() as stack:
            wl = check(args)
            if scheme is None:
                kind = make_kind(wl, prepare_root(root))
                writing = kind.root
                store = None
            else:
                kind = make_kind(wl, prepare_root(args.staging or default_root(), "--staging"))
                writing = kind.root
                store = stack.enter_context(
                    _destination(root, scheme, wl, args.endpoint, args.store_option)
                )
                files = kind.dataset_files()
                keys = _keys(kind, files)
                # Before generating: a missing bucket or bad credentials fail in a second.
                have = list_destination(store, keys)
                hint = _bench_hint(root, scheme, keys, args.endpoint, wl.kind, args)
            with _progress(args.quiet) as progress:

                def step(done: int, total: int) -> None:
                    if progress:
                        progress(f"gen {kind.workload.name}", done, total)

                kind.write(step, flag="--root" if store is None else "--staging")
                if args.verify:
                    from headrace.bench._verify import verify_dataset

                    def checked(done: int, total: int) -> None:
                        if progress:
                            progress(f"verify {kind.workload.name}", done, total)

                    replaced = verify_dataset(
                        kind, checked, flag="--root" if store is None else "--staging"
                    )
                    verified = "; verified against a fresh copy: " + (
                        f"{len(replaced)} changed in place, written again ("
                        + ", ".join(os.path.relpath(p, kind.root) for p in replaced)
                        + ")"
                        if replaced
                        else "every file the same"
                    )
                if store is not None:

                    def sent(state: Uploaded, done: int, total: int) -> None:
                        if progress:
                            label = (
                                f"upload {kind.workload.name}: {state.written} written, "
                                f"{state.skipped} kept (MB)"
                            )
                            progress(label, -(-done // 10**6), -(-total // 10**6))

                    uploaded = upload_files(
                        store,
                        list(zip(keys, files, strict=True)),
                        have=have,
                        digests=DigestCache.under(kind.root),
                        progress=sent,
                    )
    except (HeadraceError, OSError) as exc:  # OSError: a full disk, a folder removed ...
        notes = "".join(f"; {n}" for n in getattr(exc, "__notes__", ()))
        text = str(exc) if isinstance(exc, HeadraceError) else _os_error(exc, writing)
        print(f"headrace gen: {text}{notes}", file=sys.stderr)
        return 2
    if uploaded is None:
        n = len(kind.files())
        print(
            f"{kind.workload.name}: {n} file{'' if n == 1 else 's'}, "
            f"{kind.dataset_bytes():,} bytes "
            f"under {kind.root}{verified}"
        )
        return 0
    n = uploaded.written + uploaded.skipped
    print(
        f"{kind.workload.name}: {n} object{'' if n == 1 else 's'}, "
        f"{uploaded.bytes_written + uploaded.bytes_skipped:,} bytes under {root}: "
        f"{uploaded.written} written ({uploaded.bytes_written:,} bytes), "
        f"{uploaded.skipped} already there"
        + (
            f" ({uploaded.replaced} written over objects of another size or digest)"
            if uploaded.replaced
            else ""
        )
        + f"; local copy under {kind.root}{verified}{hint}"
    )
    return 0
