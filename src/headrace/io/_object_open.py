"""Opening an object store: URL schemes, S3/GCS/Azure options, plain HTTP, emulators.

:func:`open_store` turns a URL and headrace's store options into an obstore store
(and the URL it is known by); :class:`~headrace.io._objects.ObjectStore` reads
through it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

from headrace.io._obstore_missing import obstore_missing

try:
    from obstore.store import AzureStore, LocalStore, S3Store, from_url
except ModuleNotFoundError as exc:  # the optional extra: say which one
    raise obstore_missing(exc) from exc

from headrace.errors import ConfigError, HeadraceError
from headrace.io._file import file_url_path
from headrace.io._object_names import empty_segment_error, refuse_dot_segment
from headrace.io._retry import summarize

__all__ = ["AZURITE_ACCOUNT", "AZURITE_KEY", "open_store"]

_S3_SCHEMES = ("s3", "s3a")
_AZURE_SCHEMES = ("az", "azure", "abfs", "abfss", "adl")
_URL_SCHEMES = ("gs", *_AZURE_SCHEMES, "http", "https", "memory")
_NAMED_SCHEMES = ("gs", *_AZURE_SCHEMES)  # the first part of the URL names a bucket or container

# Azurite's (and the old Azure Storage Emulator's) fixed development account and key,
# published in Microsoft's documentation; they unlock nothing but a local emulator.
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
_TRUE = ("true", "1", "yes", "y", "on")


def open_store(
    url: str | Path,
    *,
    endpoint: str | None,
    region: str | None,
    access_key_id: str | None,
    secret_access_key: str | None,
    path_style: bool | None,
    allow_http: bool | None,
    config: Mapping[str, Any] | None,
    client_options: Mapping[str, Any] | None,
    timeout_s: float,
) -> tuple[str, Any]:
    """The URL a store is known by and obstore's store for ``url`` (see ObjectStore)."""
    s3_only = {
        "region": region,
        "access_key_id": access_key_id,
        "secret_access_key": secret_access_key,
        "path_style": path_style,
    }
    for name, flag in (("path_style", path_style), ("allow_http", allow_http)):
        if flag is not None and not isinstance(flag, bool):
            # A string from a command line or a config file: "false" is truthy, and
            # path_style="false" asked for path-style requests, the opposite.
            raise ConfigError(f"{url}: {name} must be True, False or None (got {flag!r}).")
    scheme = urlsplit(str(url)).scheme.lower()
    given = [k for k, v in s3_only.items() if v is not None]
    if given and scheme in _URL_SCHEMES:
        raise ConfigError(
            f"{url}: {', '.join(given)} {'applies' if len(given) == 1 else 'apply'} to s3:// "
            f"URLs only; a {scheme}:// store "
            "takes its settings as obstore's keys in config= (see docs/objects.md)."
        )
    s3_opts = {
        "endpoint": endpoint,
        "region": region,
        "access_key_id": access_key_id,
        "secret_access_key": secret_access_key,
    }
    cfg: dict[str, Any] = dict(config or {})
    cfg.update({k: v for k, v in s3_opts.items() if v is not None})
    if path_style is not None:
        cfg["virtual_hosted_style_request"] = not path_style
    if scheme == "gs" and endpoint is not None:
        # obstore's GCS store calls it base_url ("'endpoint' is not valid for store 'GCS'"):
        # an emulator, or a Private Service Connect endpoint.
        cfg["base_url"] = cfg.pop("endpoint")
    where = cfg.get("endpoint", cfg.get("base_url"))
    if where is not None and not (
        isinstance(where, str)
        and urlsplit(where).scheme.lower() in ("http", "https")
        and urlsplit(where).netloc
    ):
        # obstore takes any string and panics (a Rust unwrap) at the first request.
        raise ConfigError(
            f"{url}: endpoint {where!r} is not an http:// or https:// URL with a host "
            "(e.g. http://127.0.0.1:9000); leave it out for the store's own endpoint"
        )
    client: dict[str, Any] = {"timeout": timedelta(seconds=timeout_s)}
    client.update(client_options or {})
    if allow_http is None:
        allow_http = _allow_http_from_env(scheme, where, str(url))
    if allow_http is not None:
        client["allow_http"] = allow_http
    return _open(str(url), cfg, client)


def _open(url: str, cfg: dict[str, Any], client: dict[str, Any]) -> tuple[str, Any]:
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    # obstore retries 5xx itself unless told not to; we retry (and count) here instead.
    no_retry: Any = {"max_retries": 0}
    opts: Any = cfg
    http: Any = client
    if scheme in ("", "file") or (len(scheme) == 1 and url[1:3] == ":\\"):
        path = Path(file_url_path(url) if scheme == "file" else url).expanduser().resolve()
        if cfg:
            raise ConfigError(f"{url}: store options {sorted(cfg)} do not apply to local files.")
        if not path.is_dir():
            raise ConfigError(
                f"{url}: a local store needs an existing directory ({path} is not one)."
            )
        return path.as_uri(), LocalStore(path)
    # An object store's key is the URL's path as written: '?' and '#' are characters of
    # it, not a query and a fragment (urlsplit cut s3://b/d#1/ to the prefix d), and
    # '%' is itself (obstore's from_url decoded gs://b/pct%41/ to pctA/). Another
    # object's data, without a word, where such a prefix existed.
    raw = url.partition("://")[2].partition("/")[2]
    if scheme not in ("http", "https"):
        if "//" in "/" + raw:
            # A prefix lost its empty segments without a word (s3://b/d//x.bin read d/x.bin).
            raise empty_segment_error(url, raw)
    elif "//" in parts.path:
        raise empty_segment_error(url, parts.path[1:])
    if scheme not in ("http", "https"):
        refuse_dot_segment(url, raw)
    given = next((k for k in _CONNECTION_STRING if k in cfg), None)
    if given is not None:
        raise ConfigError(
            f"{url}: obstore reads no Azure connection string (config {given!r}); give its "
            f"parts: store_options={_connection_string_options(str(cfg[given]))}"
        )
    try:
        if scheme in _S3_SCHEMES:
            bucket = parts.netloc
            if not bucket:
                raise ConfigError(f"{url}: an S3 URL needs a bucket (s3://bucket/prefix).")
            _check_virtual_hosted(url, bucket, cfg)
            prefix = raw.strip("/") or None
            opts, keys = _own_keys(cfg)
            s3 = S3Store(
                bucket,
                prefix=prefix,
                config=opts,
                client_options=http,
                retry_config=no_retry,
                credential_provider=_given(keys),
            )
            base = f"s3://{bucket}" + (f"/{prefix}" if prefix else "")
            return base, s3
        if scheme in _URL_SCHEMES:
            opened = url
            if scheme in _NAMED_SCHEMES and not parts.netloc:
                what = "bucket" if scheme == "gs" else "container"
                raise ConfigError(
                    f"{url}: a {scheme}:// URL needs a {what} ({scheme}://{what}/prefix)."
                )
            if scheme in _NAMED_SCHEMES and raw:
                # from_url decodes the path: encoded, it gives back the key as written.
                opened = url[: len(url) - len(raw)] + quote(raw, safe="/")
            if scheme in _AZURE_SCHEMES:
                own: Any
                own, key = _own_account_key(opts)
                az = AzureStore.from_url(
                    opened,
                    config=own or None,
                    client_options=http,
                    retry_config=no_retry,
                    credential_provider=_given(key),
                )
                _check_account(url, opened, az.config)
                seen = {**az.config, **({"account_key": key["access_key"]} if key else {})}
                emulator: Any = _azure_emulator_at(seen, http)
                if emulator is not None:
                    own, key = _own_account_key(emulator[0])
                    az = AzureStore.from_url(
                        opened,
                        config=own,
                        client_options=emulator[1],
                        retry_config=no_retry,
                        credential_provider=_given(key),
                    )
                return url.rstrip("/"), az
            if scheme in ("http", "https"):
                # Its keys are joined on with a "/": http://host/pre/ asked for /pre//x.
                opened = opened.rstrip("/")
            other = from_url(
                opened, config=opts or None, client_options=http, retry_config=no_retry
            )
            if isinstance(other, AzureStore):  # https://ACCOUNT.blob.core.windows.net/...
                _check_account(url, opened, other.config)
            return url.rstrip("/"), other
    except HeadraceError:
        raise
    except Exception as exc:
        said = summarize(exc)
        if scheme in _AZURE_SCHEMES and "did not match any known pattern" in said:
            # obstore's words: "Generic S3 error: URL did not match any known pattern".
            raise ConfigError(
                f"{url}: not a form of Azure URL that obstore reads; write "
                f"{_azure_url_meant(parts.netloc, raw)}"
            ) from exc
        if "Account must be specified" in said:
            # Azure's own words name no option: the URL holds no account (az://container/
            # key), and none was given or set.
            said += (
                ": give the storage account, store_options={'config': {'account_name': "
                "..., 'account_key': ...}} (or AZURE_STORAGE_ACCOUNT_NAME), or a URL that "
                "names it, abfss://container@ACCOUNT.dfs.core.windows.net/..."
            )
            text = os.environ.get("AZURE_STORAGE_CONNECTION_STRING")
            if text:
                said += (
                    "; AZURE_STORAGE_CONNECTION_STRING is set, but obstore reads no "
                    "connection string: export its AccountName and AccountKey as "
                    "AZURE_STORAGE_ACCOUNT_NAME and AZURE_STORAGE_ACCOUNT_KEY, or give "
                    f"store_options={_connection_string_options(text)}"
                )
        raise ConfigError(f"{url}: cannot open store: {said}") from exc
    raise ConfigError(
        f"{url}: unsupported scheme {scheme!r}; use s3://, gs://, az://, http(s)://, "
        "file:// or a local path."
    )


_KEY_ID = ("access_key_id", "aws_access_key_id")
_SECRET = ("secret_access_key", "aws_secret_access_key")
_TOKEN = ("token", "session_token", "aws_session_token", "aws_token")


def _given(credential: dict[str, Any] | None) -> Any:
    """A credential provider for obstore that gives ``credential`` (``None``: none).

    Credentials given are passed this way, not in the store's config, where obstore
    fills what the config lacks from the environment and prefers some of what it finds
    there: a session token or a bearer token of the environment's went out with the
    key given (:func:`_own_keys`, :func:`_own_account_key`). A provider's credential is
    taken whole, as boto3 takes keys given; one that never expires is asked for once.
    """
    if credential is None:
        return None
    fixed = {**credential, "expires_at": None}
    return lambda: fixed


def _own_keys(cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``cfg`` and ``None``, or, where an S3 access key and secret are given without a
    token while the environment holds one for another key (``AWS_SESSION_TOKEN``:
    another account's temporary credentials, which the store answered with a 403),
    ``cfg`` less them and them, for :func:`_given`."""
    given = [k for k in (*_KEY_ID, *_SECRET, *_TOKEN) if cfg.get(k)]
    env_token = os.environ.get("AWS_SESSION_TOKEN") or os.environ.get("AWS_SECURITY_TOKEN")
    if not env_token or any(k in _TOKEN for k in given):
        return cfg, None
    key_id = next((cfg[k] for k in _KEY_ID if cfg.get(k)), None)
    secret = next((cfg[k] for k in _SECRET if cfg.get(k)), None)
    if key_id is None or secret is None or key_id == os.environ.get("AWS_ACCESS_KEY_ID"):
        # The environment's credentials (or none), or its key given again: its token
        # belongs to that key, and obstore adds it.
        return cfg, None
    rest = {k: v for k, v in cfg.items() if k not in (*_KEY_ID, *_SECRET, *_TOKEN)}
    return rest, {"access_key_id": str(key_id), "secret_access_key": str(secret), "token": None}


# obstore's names for an Azure storage account's key.
_ACCOUNT_KEY = (
    "account_key",
    "access_key",
    "master_key",
    "azure_storage_account_key",
    "azure_storage_access_key",
    "azure_storage_master_key",
)


def _own_account_key(cfg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``cfg`` and ``None``, or, where it gives an Azure account key, ``cfg`` less the key
    and the key, for :func:`_given`: obstore signs with a bearer token of the environment
    (``AZURE_STORAGE_TOKEN``) before an account key in its config."""
    given = next((cfg[k] for k in _ACCOUNT_KEY if cfg.get(k)), None)
    if given is None:
        return cfg, None
    return {k: v for k, v in cfg.items() if k not in _ACCOUNT_KEY}, {"access_key": str(given)}


_CONNECTION_STRING = ("connection_string", "azure_storage_connection_string")
# A connection string's parts, as obstore's Azure config keys (a secret's shown by name).
_CONNECTION_PARTS = {
    "accountname": ("account_name", None),
    "accountkey": ("account_key", "<its AccountKey>"),
    "sharedaccesssignature": ("sas_key", "<its SharedAccessSignature>"),
}


def _connection_string_options(text: str) -> dict[str, Any]:
    """The store options that say what an Azure connection string says (``AccountName=..;
    AccountKey=..;BlobEndpoint=..``, as the portal's "Access keys" page shows it), its
    secrets named rather than copied into a message that may reach a log."""
    parts = {}
    for item in text.split(";"):
        name, eq, value = item.strip().partition("=")  # a base64 key ends with "="
        if eq:
            parts[name.strip().lower()] = value.strip()
    config: dict[str, Any] = {}
    for name, (key, secret) in _CONNECTION_PARTS.items():
        if parts.get(name):
            config[key] = secret or parts[name]
    if parts.get("usedevelopmentstorage", "").lower() in _TRUE:
        config["use_emulator"] = True
    options: dict[str, Any] = {"config": config}
    if parts.get("blobendpoint"):
        options["endpoint"] = parts["blobendpoint"].rstrip("/")
    elif parts.get("endpointsuffix", "core.windows.net") != "core.windows.net" and config.get(
        "account_name"
    ):
        # Another cloud than Azure's public one (core.chinacloudapi.cn, ...).
        scheme = parts.get("defaultendpointsprotocol", "https")
        options["endpoint"] = f"{scheme}://{config['account_name']}.blob.{parts['endpointsuffix']}"
    return options


# The hosts whose first label obstore reads as an Azure storage account.
_AZURE_DOMAINS = tuple(
    f"{kind}.{cloud}"
    for kind in ("blob", "dfs")
    for cloud in ("core.windows.net", "fabric.microsoft.com")
)


def _azure_url_meant(netloc: str, path: str) -> str:
    """The URL obstore reads for an Azure URL it does not (``az://container@account/...``,
    ``az://ACCOUNT.blob.core.windows.net/container/...``), or its forms."""
    container, at, host = netloc.rpartition("@")
    account, _, domain = host.partition(".")
    if at and container and account:
        return f"abfss://{container}@{account}.dfs.core.windows.net/{path}"
    if not at and domain in _AZURE_DOMAINS:
        return f"https://{host}/{path}"
    return (
        "az://CONTAINER/prefix with store_options={'config': {'account_name': ACCOUNT}}, "
        "abfss://CONTAINER@ACCOUNT.dfs.core.windows.net/prefix or "
        "https://ACCOUNT.blob.core.windows.net/CONTAINER/prefix"
    )


def _check_account(url: str, opened: str, config: Mapping[str, Any]) -> None:
    """Refuse an Azure URL that names one storage account while the options name another.

    obstore takes ``config``'s ``account_name`` over the URL's
    (``https://ACCOUNT.blob.core.windows.net/...``, ``abfss://c@ACCOUNT.dfs...``): the
    partner lab's URL with the options of one's own account read one's own account's
    container of that name, another dataset, without a word.
    """
    account, _, domain = (urlsplit(opened).hostname or "").partition(".")
    named = account if domain in _AZURE_DOMAINS else None  # as obstore reads the URL
    given = config.get("account_name")
    if named is None or given is None or str(named).lower() == str(given).lower():
        return
    container = config.get("container_name", "CONTAINER")
    raise ConfigError(
        f"{url}: the URL names the storage account {named!r}, but store_options config "
        f"names account_name {given!r}, which obstore would read instead ({given}'s "
        f"container {container!r}, another account's data); drop account_name (and "
        f"{given}'s key) from config to read {named}, or give {named}'s account_name and key"
    )


def _check_virtual_hosted(url: str, bucket: str, cfg: Mapping[str, Any]) -> None:
    """Refuse virtual-hosted-style requests (``path_style=False``) to an endpoint whose
    host does not name the bucket.

    obstore sends them to the endpoint as given (boto3 puts the bucket in front of
    its host): ``s3://bkt/data/x.bin`` at ``http://127.0.0.1:9000`` asked for
    ``/data/x.bin``, which a path-style server reads as object ``x.bin`` of another
    bucket, ``data``, and served (moto did) without a word.
    """
    env = os.environ
    virtual = next(
        (
            cfg[k]
            for k in ("virtual_hosted_style_request", "aws_virtual_hosted_style_request")
            if k in cfg
        ),
        env.get("AWS_VIRTUAL_HOSTED_STYLE_REQUEST", ""),
    )
    endpoint = next(
        (
            cfg[k]
            for k in ("endpoint", "aws_endpoint", "aws_endpoint_url", "endpoint_url")
            if cfg.get(k)
        ),
        env.get("AWS_ENDPOINT_URL") or env.get("AWS_ENDPOINT"),
    )
    if endpoint is None:
        return
    if str(virtual).lower() not in _TRUE:
        _check_endpoint_path(url, bucket, str(endpoint))
        return
    host = urlsplit(str(endpoint)).hostname or ""
    if host.startswith(f"{bucket}."):
        return
    raise ConfigError(
        f"{url}: path_style=False (virtual-hosted-style requests) sends every request to "
        f"the endpoint as given, whose host must then name the bucket ({bucket}.HOST); "
        f"{endpoint} does not, so a key's first folder would be read as a bucket (another "
        f"bucket's object, or none). Pass path_style=True, or the endpoint with the bucket "
        f"in its host (e.g. http://{bucket}.minio.local:9000)"
    )


def _check_endpoint_path(url: str, bucket: str, endpoint: str) -> None:
    """Refuse a path-style endpoint whose path ends with the bucket's name.

    Cloudflare R2's dashboard (and many a how-to) writes the S3 API as
    ``https://ACCOUNT.r2.cloudflarestorage.com/BUCKET``; given as the endpoint,
    path-style requests put the bucket after it once more (``/BUCKET/BUCKET/key``),
    and every object that exists was "no such object". A path of another name
    (a gateway serving S3 under ``/s3``) is taken as given.
    """
    parts = urlsplit(endpoint)
    if parts.path.rstrip("/").rpartition("/")[2] != bucket:
        return
    without = parts._replace(path=parts.path.rstrip("/")[: -len(bucket)].rstrip("/")).geturl()
    prefix = url.partition("://")[2].partition("/")[2].strip("/")
    asked = f"{parts.path.rstrip('/')}/{bucket}/" + (f"{prefix}/" if prefix else "")
    raise ConfigError(
        f"{url}: endpoint {endpoint!r} ends with the bucket's name, and path-style requests "
        f"put the bucket after the endpoint: every request would ask for {asked}KEY, another "
        f"object (none: a 404 for each object that exists); give the endpoint without it "
        f"({without})"
    )


def _azure_emulator_at(
    config: Mapping[str, Any], client: Mapping[str, Any]
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The store options that reach an Azure emulator at ``config``'s endpoint, if it names one.

    obstore's ``use_emulator`` ignores ``endpoint`` and always dials 127.0.0.1:10000
    (or ``$AZURITE_BLOB_STORAGE_URL``, read once for the whole process), so an
    emulator on any other port would be missed without a word. With an endpoint,
    the emulator is reached as an ordinary account: path-style URLs under
    ``/devstoreaccount1``, the emulator's published key unless another credential
    is given, and plain HTTP allowed for an ``http://`` endpoint. ``config`` is the
    store's own (keys normalised; the documented environment variables fill in what it
    lacks); ``None``: no change.
    """
    env = os.environ
    endpoint = (
        config.get("endpoint") or env.get("AZURE_STORAGE_ENDPOINT") or env.get("AZURE_ENDPOINT")
    )
    use = config.get("use_emulator", env.get("AZURE_STORAGE_USE_EMULATOR", ""))
    if not endpoint or str(use).lower() not in _TRUE:
        return None
    endpoint = str(endpoint).rstrip("/")  # obstore would put "//" before the container
    # False, not absent: AZURE_STORAGE_USE_EMULATOR would switch it back on.
    out = {**config, "use_emulator": False}
    out.setdefault("account_name", AZURITE_ACCOUNT)
    if not any(k in config for k in ("account_key", "sas_key", "token", "bearer_token")):
        out["account_key"] = AZURITE_KEY
    if urlsplit(endpoint).path == "":
        endpoint = f"{endpoint}/{out['account_name']}"
    out["endpoint"] = endpoint
    http = dict(client)
    if endpoint.startswith("http://"):
        http.setdefault("allow_http", True)
    return out, http


def _allow_http_from_env(scheme: str, endpoint: str | None, url: str) -> bool | None:
    """Whether plain HTTP is allowed when ``allow_http`` is not given: as the environment
    says (``AWS_ALLOW_HTTP``, ``AZURE_ALLOW_HTTP``, ``GOOGLE_ALLOW_HTTP``), else yes for
    an endpoint or URL written ``http://`` (MinIO, moto, a lab Ceph, a local file server;
    for S3 also ``AWS_ENDPOINT_URL`` / ``AWS_ENDPOINT``), else None (obstore's default).

    Set here because the client options headrace passes (a timeout) replace those obstore
    would read from the environment: ``AWS_ENDPOINT_URL=http://...`` with
    ``AWS_ALLOW_HTTP=true`` was refused with a bare "builder error".
    """
    prefix = "AWS" if scheme in _S3_SCHEMES else "AZURE" if scheme in _AZURE_SCHEMES else None
    if scheme == "gs":
        prefix = "GOOGLE"
    flag = os.environ.get(f"{prefix}_ALLOW_HTTP") if prefix else None
    if flag is not None and flag.strip():
        return flag.strip().lower() in ("1", "true", "yes", "on")
    if endpoint is None and scheme in _S3_SCHEMES:
        endpoint = os.environ.get("AWS_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT")
    if any(u.lower().startswith("http://") for u in (endpoint or "", url)):
        return True
    return None
