"""Bounded retries with exponential backoff and jitter, and obstore's errors mapped to ours.

obstore (object_store underneath) can retry by itself, but then we could not
count retries, tell a truncated body from a 503, or name the byte range in the
final message. So stores are built with obstore's retries off and every
request goes through :func:`classify` and :meth:`RetryPolicy.delay_s` here.
"""

from __future__ import annotations

import html
import os
import random
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from headrace.errors import (
    ConfigError,
    ObjectNotFoundError,
    PermissionDeniedError,
    ReadEOFError,
    StorageError,
    TransientStorageError,
)

__all__ = [
    "RetryPolicy",
    "classify",
    "is_connection_failure",
    "is_panic",
    "is_throttle",
    "summarize",
]

_STATUS = re.compile(r"non-2xx status code: (\d{3})|status: (\d{3})")
# What hyper/reqwest say when the connection broke or the clock ran out; all worth a retry.
# LocalFileSystem's word for a range that starts past the end (S3 says 416).
_EOF_WORDS = ("requested range was invalid", "range not satisfiable", "invalidrange")
_TIMEOUT_WORDS = ("timedout", "timed out", "kind: timeout")
_BODY_WORDS = ("incompletebody", "body error", "kind: body", "unexpectedeof")
_CONNECTION_WORDS = (
    "error sending request",
    "connection reset",
    "connection refused",
    "connection closed",
    "broken pipe",
    "incompletemessage",
)


#: The longest wait or timeout a policy takes, in seconds (about 31 years): time.sleep
#: and datetime.timedelta overflow not far above.
_MAX_S = 1e9


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How often and how patiently to retry transient failures.

    ``attempts`` counts the first try: 5 means up to 4 retries. The n-th retry
    waits ``min(max_delay_s, base_delay_s * 2**(n-1))``, scaled by a random
    factor in [0.5, 1.0) so that many clients that failed together do not
    retry together. ``timeout_s`` bounds each request (connect + transfer).
    ``adapt_in_flight``: when the store throttles (HTTP 429, 503 "SlowDown"),
    halve the tries this store keeps in flight, then add one back per round of
    successes (``headrace.io._throttle``), and retry throttled tries without
    using an attempt (up to ``4 * attempts`` throttles per request); off, every
    caller keeps its own ``in_flight`` whatever the store says, and a throttle
    is a failed attempt like a 500.

    ``connect_retry_s``: a connection that is refused, reset or closed before
    any response fails in a millisecond, so ``attempts`` tries of it span only
    their backoff (under a second by default), shorter than a server's restart
    or a stall under load. Such failures are retried, with the same backoff,
    past ``attempts`` until this many seconds have passed since the request's
    first try (a request gives up once the next wait would end past it). 0
    counts them as attempts like any other failure.
    """

    attempts: int = 5
    base_delay_s: float = 0.05
    max_delay_s: float = 2.0
    timeout_s: float = 30.0
    adapt_in_flight: bool = True
    connect_retry_s: float = 10.0

    def __post_init__(self) -> None:
        if (
            isinstance(self.attempts, bool)
            or not isinstance(self.attempts, int)
            or self.attempts < 1
        ):
            raise ConfigError(f"Retry attempts must be an integer >= 1 (got {self.attempts!r}).")
        # "not <=" refuses NaN too: time.sleep(nan) raised ValueError at the first retry,
        # and a wait or timeout past _MAX_S OverflowError from time.sleep or timedelta.
        if not (0 <= self.base_delay_s <= _MAX_S and 0 <= self.max_delay_s <= _MAX_S):
            raise ConfigError(
                f"Retry delays must be seconds from 0 to {_MAX_S:g} (got base_delay_s="
                f"{self.base_delay_s}, max_delay_s={self.max_delay_s})."
            )
        if not 0 < self.timeout_s <= _MAX_S:
            raise ConfigError(
                f"Request timeout_s must be > 0 and at most {_MAX_S:g} seconds (got "
                f"{self.timeout_s}); for a request that may take very long, give a long "
                "timeout, e.g. 86400 for a day."
            )
        if not self.connect_retry_s >= 0:  # NaN too
            raise ConfigError(
                f"connect_retry_s must be >= 0 seconds (got {self.connect_retry_s}); "
                "0 counts connection failures as attempts like any other failure."
            )

    def delay_s(self, retry: int, rng: random.Random) -> float:
        """Seconds to wait before retry number ``retry`` (1-based)."""
        # 2.0**1024 overflows a float: past the 64th retry any cap is reached anyway.
        cap = min(self.max_delay_s, self.base_delay_s * 2.0 ** min(retry - 1, 64))
        return cap * (0.5 + 0.5 * rng.random())


def summarize(exc: BaseException) -> str:
    """The first, human part of an obstore message, without the Rust debug dump."""
    text = str(exc).split("\n\nDebug source", 1)[0].strip()
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def _status(text: str) -> int | None:
    m = _STATUS.search(text)
    if m is None:
        return None
    return int(m.group(1) or m.group(2))


#: Where an S3 client without credentials looks for an instance's role (IMDS).
_METADATA_HOST = "169.254.169.254"

_THROTTLE_WORDS = ("slowdown", "serverbusy", "toomanyrequests", "throttl")


_AZURE = ("az://", "azure://", "abfs://", "abfss://", "adl://")
# The hosts whose first label is an Azure storage account (as io/_object_open.py reads them).
_AZURE_DOMAINS = tuple(
    f"{kind}.{cloud}"
    for kind in ("blob", "dfs")
    for cloud in ("core.windows.net", "fabric.microsoft.com")
)


def _azure_account(where: str) -> str | None:
    """The storage account an Azure URL names (``abfss://c@ACCOUNT.dfs.core.windows.net``,
    ``https://ACCOUNT.blob.core.windows.net``), or ``None`` (``az://``: its config's)."""
    account, _, domain = (urlsplit(where).hostname or "").partition(".")
    return account if domain in _AZURE_DOMAINS else None


def _is_azure(where: str) -> bool:
    # An https:// URL of an Azure host too: it was told of AWS keys.
    return where.startswith(_AZURE) or _azure_account(where) is not None


def _no_credentials(where: str, brief: str) -> str:
    """What to say when obstore found no credentials and asked the instance metadata
    service, in ``where``'s cloud's own terms: a gs:// user was told of neither
    GOOGLE_SERVICE_ACCOUNT_KEY nor gcloud's login, an Azure user of neither SAS nor
    ``az login``, and --store-option config.KEY=VALUE gives each on the command line."""
    metadata = f"the instance metadata service at {_METADATA_HOST} gave none"
    if where.startswith("gs://"):
        return (
            f"{where}: no credentials found: none were given (store_options config "
            "service_account: a key file's path, service_account_key: its JSON, or "
            "application_credentials; on the command line --store-option "
            "config.service_account=KEY.json) or set in the environment "
            "(GOOGLE_SERVICE_ACCOUNT or GOOGLE_APPLICATION_CREDENTIALS: a key file's path; "
            "GOOGLE_SERVICE_ACCOUNT_KEY: its JSON), there is no login of `gcloud auth "
            "application-default login` (~/.config/gcloud/application_default_credentials"
            f".json), and {metadata} ({brief})"
        )
    if _is_azure(where):
        account = _azure_account(where)
        whose = f"the storage account {account!r} (the URL's)" if account else "the account"
        return (
            f"{where}: no credentials found for {whose}: none were given (store_options "
            "config account_key, sas_key (a SAS token) or token (a bearer token); on the "
            "command line --store-option config.account_key=KEY) or set in the environment "
            "(AZURE_STORAGE_ACCOUNT_KEY, AZURE_STORAGE_SAS_KEY, or a service principal's "
            "AZURE_CLIENT_ID, AZURE_CLIENT_SECRET and AZURE_TENANT_ID); after `az login`, "
            "config use_azure_cli=true (AZURE_USE_AZURE_CLI=true) signs with the Azure CLI's "
            f"login; and {metadata} (a managed identity) ({brief})"
        )
    return (
        f"{where}: no credentials found: none were given (store_options "
        "access_key_id/secret_access_key, or config=) or set in the environment "
        f"(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), and {metadata}"
        f"{_profile_note(where)} ({brief})"
    )


def _profile_note(where: str = "s3://") -> str:
    """What to say of an AWS profile: obstore reads no ``~/.aws`` files, so a profile
    (``AWS_PROFILE``, SSO) that boto3 and the aws CLI use is not seen (said of S3 only)."""
    if where.startswith(("gs://", *_AZURE)):
        return ""
    profile = os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE")
    files = [
        os.environ.get("AWS_SHARED_CREDENTIALS_FILE") or "~/.aws/credentials",
        os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config",
    ]
    if profile is None and not any(os.path.exists(os.path.expanduser(f)) for f in files):
        return ""
    name = profile or "default"
    return (
        f"; the AWS profile {name!r} ({'AWS_PROFILE' if profile else 'in ~/.aws'}) is not "
        "read (obstore reads no ~/.aws files, as boto3 and the aws CLI do): export its keys, "
        f'e.g. eval "$(aws configure export-credentials --profile {name} --format env)", '
        "or pass them in store_options"
    )


# What in obstore's words names the object, not the store's answer: a URL, a key.
_NAMES = re.compile(r"[a-z][a-z0-9+.-]*://[^\s)]*|(?:location|path):? \S+", re.IGNORECASE)


def is_throttle(exc: BaseException) -> bool:
    """Whether the store asked us to slow down (429, 503, or an error code that says so).

    The words are looked for in the store's error code, or, where it gave none, in the
    message without its URLs and keys: a key under ``slowdown/`` or ``throttled-logs/``
    made every failure there a throttle (a 500 retried as one, a 404 halving the limit).
    """
    text = str(exc)
    status = _status(text)
    if status in (429, 503):
        return True
    code, _ = _store_said(text)
    if code is None and status is not None:
        return False  # another HTTP status, and no code that says "slow down"
    low = (_NAMES.sub(" ", text) if code is None else code).lower()
    return any(word in low for word in _THROTTLE_WORDS)


def is_connection_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is a connection refused, reset or closed before any response.

    Not a timeout (that took its ``timeout_s``), an HTTP status or a body cut
    short: the cases that fail at once and so are retried by time, not count.
    """
    if isinstance(exc, TimeoutError | StorageError):  # ours are classified where raised
        return False
    if isinstance(exc, ConnectionError):
        return True
    text = str(exc)
    if _status(text) is not None:
        return False
    low = _NAMES.sub(" ", text).lower()  # not the words of a key: .../timedout/x.bin
    if any(word in low for word in _TIMEOUT_WORDS + _BODY_WORDS + _EOF_WORDS):
        return False
    return any(word in low for word in _CONNECTION_WORDS)


_CONNECT_ERROR = re.compile(r'ConnectError\(\s*"([^"]+)"')
_OS_DETAIL = re.compile(r'(?:message|error): "([^"]+)"')


def connect_cause(text: str) -> str:
    """Why a connection could not be made, from obstore's debug dump, where its one-line
    message says only "error sending request": ``"the host name could not be resolved
    (dns error: ...); "`` or ``"tcp connect error: Connection refused; "`` (``""``
    if the dump does not say)."""
    kind = _CONNECT_ERROR.search(text)
    if kind is None:
        return ""
    details = _OS_DETAIL.findall(text[kind.end() :])
    said = f"{kind.group(1)}: {details[-1]}" if details else kind.group(1)
    if kind.group(1) == "dns error":
        return f"the host name could not be resolved ({said}); "
    return f"{said}; "


# The host (and port) of the https:// URL a request went to, in obstore's debug dump.
_HTTPS_HOST = re.compile(r"https://([^/\s,)\]]+)")


# S3's codes (in a 400's body) for credentials that the store no longer or never took.
_CREDENTIAL_CODES = frozenset(
    {"ExpiredToken", "InvalidToken", "TokenRefreshRequired", "InvalidAccessKeyId"}
)
_ERROR_CODE = re.compile(r"<Code>([^<]{1,100})</Code>")
_ERROR_MESSAGE = re.compile(r"<Message>([^<]{1,300})</Message>")


def _store_said(text: str) -> tuple[str | None, str]:
    """The code of an S3-style XML error body in ``text``, and ``": Code: Message"`` (or
    ``None, ""``): the store's own words (``ExpiredToken``, the region that
    ``AuthorizationHeaderMalformed`` expects), which a message's first 300 characters
    may cut off."""
    code = _ERROR_CODE.search(text)
    if code is None:
        return None, ""
    message = _ERROR_MESSAGE.search(text, code.end())
    said = f": {code.group(1)}" + (f": {html.unescape(message.group(1))}" if message else "")
    return code.group(1), said


def out_of_descriptors() -> str:
    """What to do when this process has no file descriptor left for a request (EMFILE)."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        limit = "unlimited" if soft == resource.RLIM_INFINITY else str(soft)
    except (ImportError, OSError, ValueError):  # (no resource module on Windows)
        limit = "unknown"
    return (
        f"this process is out of file descriptors (Too many open files; ulimit -n is "
        f"{limit}), and each request in flight holds one (a connection, or a file): "
        "raise the limit before the job starts (ulimit -n 65536; docker run --ulimit "
        "nofile=65536), or lower in_flight= (max_in_flight= of ObjectStore.get_many)"
    )


def _not_found(where: str, text: str, brief: str) -> ObjectNotFoundError:
    """A 404: of the object, or of the bucket or container it was looked for in.

    The store's error code is in the response body, which ``brief`` may have cut off.
    """
    low = text.lower()
    if "containernotfound" in low:
        container = _container_first(where)
        return ObjectNotFoundError(f"{where}: no such container ({brief}){container}")
    if "nosuchbucket" in low:
        return ObjectNotFoundError(f"{where}: no such bucket ({brief})")
    return ObjectNotFoundError(f"{where}: no such object ({brief})")


def _container_first(where: str) -> str:
    """For an ``az://`` URL: that it names the container first, and the URL meant if its
    first part is the storage account (``az://ACCOUNT/container/...``, the order of
    ``https://`` URLs and of the portal's pages)."""
    scheme, _, rest = where.partition("://")
    if scheme not in ("az", "azure") or "@" in rest.partition("/")[0]:
        return ""
    first, _, after = rest.partition(", bytes [")[0].partition("/")
    meant = (
        f"{scheme}://{after.rstrip('/')}" if after.strip("/") else f"{scheme}://CONTAINER/prefix"
    )
    return (
        f"; an {scheme}:// URL names the container first ({scheme}://CONTAINER/prefix), the "
        "storage account being config account_name (or AZURE_STORAGE_ACCOUNT_NAME): if "
        f"{first!r} is the account, write {meant} with account_name {first!r}"
    )


def is_panic(exc: BaseException) -> bool:
    """Whether ``exc`` is a panic of obstore's Rust code (pyo3's ``PanicException``, a
    ``BaseException``, so no ``except Exception`` catches it; from an ``*_async`` call,
    ``RustPanic``, which keeps none of the panic's words: "unknown error")."""
    kind = type(exc)
    return (kind.__name__, kind.__module__) in (
        ("PanicException", "pyo3_runtime"),
        ("RustPanic", "pyo3_async_runtimes"),
    )


# A panic's words when it cut the ranges of a coalesced GET out of a body shorter than
# asked (obstore's get_ranges slices it unchecked): a body cut short, as any other is.
_SHORT_BODY_PANICS = ("range start must not be greater than end", "range end out of bounds")


def classify(exc: BaseException, where: str) -> tuple[StorageError | ConfigError, bool]:
    """Map ``exc`` to headrace's tree; the flag says whether a retry may help.

    ``where`` names the object and range (``s3://bucket/key, bytes [a, b)``) and
    starts every message.
    """
    if isinstance(exc, StorageError):
        return exc, isinstance(exc, TransientStorageError)
    # Imported here, not at the top: headrace.io._object_names (and so every local
    # format) uses summarize(), and a NumPy-only install has no obstore.
    import obstore.exceptions as obx

    text = str(exc)
    brief = summarize(exc)
    if is_panic(exc):
        if any(words in text for words in _SHORT_BODY_PANICS):
            return TransientStorageError(
                f"{where}: response body was cut short (obstore panicked: {brief})"
            ), True
        return StorageError(f"{where}: obstore failed (a panic in its Rust code: {brief})"), False
    if _METADATA_HOST in text:
        # No credentials in the arguments or the environment: obstore asked the cloud
        # instance metadata service, which is not there (or refused). Not "access denied".
        return PermissionDeniedError(_no_credentials(where, brief)), False
    if "builder error" in text and "http://" in text:
        return ConfigError(
            f"{where}: the endpoint is plain http:// but plain HTTP is not allowed "
            "(allow_http=False, or AWS_ALLOW_HTTP/AZURE_ALLOW_HTTP/GOOGLE_ALLOW_HTTP=false): "
            f"pass allow_http=True in store_options, or use an https:// endpoint ({brief})"
        ), False
    if isinstance(exc, obx.NotFoundError) or (
        isinstance(exc, FileNotFoundError) and not isinstance(exc, obx.BaseError)
    ):
        return _not_found(where, text, brief), False
    code, said = _store_said(text)
    if code == "InvalidObjectState":
        # S3 answers a GET of an object in Glacier Flexible Retrieval or Deep Archive
        # (not restored) with 403 InvalidObjectState: not a matter of permissions.
        return StorageError(
            f"{where}: the object is archived (an S3 Glacier or Deep Archive storage class) "
            "and cannot be read until it is restored: aws s3api restore-object, then wait "
            f"for the restore (hours){said} ({brief})"
        ), False
    if isinstance(exc, obx.PermissionDeniedError | obx.UnauthenticatedError | PermissionError):
        return _denied(where, said, brief), False
    ranges = _unranged(where, text, brief)
    if ranges is not None:
        return ranges, False
    if isinstance(exc, obx.UnknownConfigurationKeyError | obx.InvalidPathError):
        return ConfigError(f"{where}: {brief}"), False
    if isinstance(exc, ValueError):
        return ConfigError(f"{where}: invalid key or argument ({brief})"), False
    if isinstance(exc, TimeoutError):
        return TransientStorageError(f"{where}: timed out ({brief})"), True
    status = _status(text)
    if status is not None:
        if status == 416:
            eof = ReadEOFError(f"{where}: range starts past the end of the object ({brief})")
            return eof, False
        if status in (403, 401) or (status == 400 and code in _CREDENTIAL_CODES):
            return _denied(where, said, brief), False
        if status == 404:
            return _not_found(where, text, brief), False
        if status in (405, 501) and "PROPFIND" in text:
            # A plain HTTP server (nginx, Python's http.server): obstore lists by WebDAV.
            return StorageError(
                f"{where}: HTTP {status} to a listing: this HTTP server cannot list its files "
                "(obstore lists http(s):// by WebDAV PROPFIND); name the objects instead, as "
                f"a list of their URLs ({brief})"
            ), False
        if status == 501:  # Not Implemented: the same answer every time
            return StorageError(f"{where}: HTTP {status} ({brief})"), False
        if status >= 500 or status in (408, 429):
            return TransientStorageError(f"{where}: HTTP {status} ({brief})"), True
        return StorageError(f"{where}: HTTP {status}{said} ({brief})"), False
    # The store's words, not those of a URL or key (a refused connection to .../timedout/
    # was "timed out", and so not retried for connect_retry_s).
    low = _NAMES.sub(" ", text).lower()
    if "too many open files" in low:
        # EMFILE (obstore's "tcp open error: Too many open files", or "(os error 24)"):
        # said as a failed connection before 2026-12-07, which sent users to the network.
        return TransientStorageError(f"{where}: {out_of_descriptors()} ({brief})"), True
    if "invalidcertificate" in low:
        # A TLS handshake that will fail the same way every time: say so, do not retry.
        why = re.search(r"InvalidCertificate\(\s*(\w+)(?:\(\s*(?:\w+\(\s*)*(\w+))?", text)
        detail = "" if why is None else ": " + " ".join(w for w in why.groups() if w)
        return StorageError(
            f"{where}: the server's TLS certificate is not trusted{detail}; for a test "
            "endpoint with a self-signed certificate, store_options={'client_options': "
            "{'allow_invalid_certificates': True}} turns verification off"
        ), False
    if "invalidcontenttype" in low:
        # TLS spoken to a server that answered otherwise: plain HTTP (MinIO, moto, a
        # proxy on localhost) named as https://. Retried as a connection failure for
        # connect_retry_s before 2026-12-03, saying only "error sending request".
        host = _HTTPS_HOST.search(text)
        at = "the endpoint" if host is None else f"https://{host.group(1)}"
        plain = "http://HOST:PORT" if host is None else f"http://{host.group(1)}"
        return StorageError(
            f"{where}: {at} does not answer in TLS (a plain HTTP server?): give the "
            f"endpoint as {plain}, which allows plain HTTP ({brief})"
        ), False
    if _REDIRECTED in low:
        return StorageError(_other_region(where, brief)), False
    if any(word in low for word in _EOF_WORDS):
        eof = ReadEOFError(f"{where}: range starts past the end of the object ({brief})")
        return eof, False
    if any(word in low for word in _TIMEOUT_WORDS):
        return TransientStorageError(f"{where}: timed out ({brief})"), True
    if any(word in low for word in _BODY_WORDS):
        return TransientStorageError(f"{where}: response body was cut short ({brief})"), True
    if "invalid list response" in low:
        # A listing's XML that does not parse, its framing whole: a body cut short or
        # garbled on the way (a GET's is checked by its length), asked again.
        return TransientStorageError(
            f"{where}: the listing's response did not parse (cut short or garbled on the "
            f"way?) ({brief})"
        ), True
    if any(word in low for word in _CONNECTION_WORDS):
        cause = connect_cause(text)
        return TransientStorageError(f"{where}: connection failed ({cause}{brief})"), True
    if isinstance(exc, ConnectionError):
        return TransientStorageError(f"{where}: {brief}"), True
    return StorageError(f"{where}: {type(exc).__name__}: {brief}"), False


# obstore's words for a ranged GET answered with other bytes than asked: 200 and the
# whole object (an HTTP store's "Range request not supported", an S3, GCS or Azure store's
# "non-partial response"), a 206 for another range ("Requested 100..150, got 101..151"), or
# a 206 that does not say which bytes it holds.
_WHOLE_WORDS = ("range request not supported", "received non-partial response")
_OTHER_RANGE = re.compile(r"Requested (\d+)\.\.(\d+), got (\d+)\.\.(\d+)")
_NO_CONTENT_RANGE = "content-range header not present in partial response"
# obstore's words for an answer without Content-Length (generated or streamed, chunked or
# ended by closing the connection): it needs one for the object's size.
_NO_LENGTH = "content-length header missing from response"
_RANGED_FIX = (
    "whole-object reads work (a FileSource's files with hdf5_ranges_above=None and "
    "samples_per_file given as counts, not 'header'); ranged reads need a server that "
    "answers Range with 206 Partial Content and the Content-Range asked for (nginx, S3, "
    "MinIO, any object store; check a proxy or cache in front of it), or a local copy"
)


def _unranged(where: str, text: str, brief: str) -> StorageError | None:
    """A ranged GET answered with other bytes than asked for, or any answer without a
    Content-Length, said as such (``None``: not).

    obstore refuses the body, so no wrong byte is read; but its words ("Generic S3
    error: Received non-partial response when range requested") said neither what the
    server did nor the way out, and only for an http(s):// store were they explained.
    Not retried: a server that ignores Range, or a proxy or cache that answers with
    another range, answers every try the same way.
    """
    low = text.lower()
    if any(word in low for word in _WHOLE_WORDS):
        did = "it answered a Range request with 200 and the whole object"
        return StorageError(
            f"{where}: the server does not serve byte ranges ({did}); {_RANGED_FIX} ({brief})"
        )
    other = _OTHER_RANGE.search(text)
    if other is not None:
        asked_from, asked_to, got_from, got_to = other.groups()
        return StorageError(
            f"{where}: the server answered bytes [{got_from}, {got_to}) (206 Partial "
            f"Content) for bytes [{asked_from}, {asked_to}); refusing them, they are not "
            f"the bytes asked for; {_RANGED_FIX} ({brief})"
        )
    if _NO_CONTENT_RANGE in low:
        return StorageError(
            f"{where}: the server answered a Range request with 206 Partial Content without "
            "a Content-Range header, so which bytes it sent is unknown; refusing them; "
            f"{_RANGED_FIX} ({brief})"
        )
    if _NO_LENGTH in low:
        return StorageError(
            f"{where}: the server answered without a Content-Length header (a generated or "
            "streamed answer), so the object's size is unknown; headrace reads files from a "
            "static file server (nginx, Apache, a Hugging Face or other CDN) or an object "
            f"store, which send one; or read a local copy ({brief})"
        )
    return None


# obstore's words for a 3xx without a Location header: what S3 answers (301
# PermanentRedirect, its body and x-amz-bucket-region header dropped by obstore) a request
# signed for another region than the bucket's.
_REDIRECTED = "received redirect without location"


def _other_region(where: str, brief: str) -> str:
    """A redirect that names no place, said as what it is on S3: the bucket's region is
    not the store's (``region``, else ``AWS_REGION``, else obstore's us-east-1). Every
    try is answered the same way: not retried."""
    if not where.startswith("s3://"):
        return f"{where}: the server answered with a redirect that names no Location ({brief})"
    bucket = where[len("s3://") :].partition("/")[0].partition(",")[0]
    return (
        f"{where}: the bucket is in another region than the store's (S3 answered 301 "
        "PermanentRedirect, as it does a request signed for another region): pass "
        "store_options={'region': 'BUCKET_REGION'} (or set AWS_REGION) with the bucket's "
        f"region, which `aws s3api get-bucket-location --bucket {bucket}` prints ({brief})"
    )


def _denied(where: str, said: str, brief: str) -> PermissionDeniedError:
    """Access denied to ``where``; for an http(s):// server, how it is sent a token (a
    private Hugging Face repository's); for S3, what to check."""
    hint = after = ""
    if _is_azure(where):  # before http(s)://: https://ACCOUNT.blob.core.windows.net/...
        account = _azure_account(where)
        after = (
            "; check the account's credentials (store_options config account_name and "
            "account_key, or a sas_key or bearer token; or AZURE_STORAGE_ACCOUNT_NAME/"
            "AZURE_STORAGE_ACCOUNT_KEY"
            + (f": the key must be {account!r}'s, the URL's account" if account else "")
            + "), a SAS token's permissions and expiry, a login's role (Storage Blob Data "
            "Reader) and the container's access"
        )
    elif where.startswith(("http://", "https://")):
        hint = (
            "; a server that asks for a token is sent one with store_options={'client_options': "
            "{'default_headers': {'Authorization': 'Bearer TOKEN'}}}"
        )
    elif where.startswith("gs://"):
        after = (
            "; check the credentials (store_options config service_account or "
            "service_account_key; or GOOGLE_SERVICE_ACCOUNT, GOOGLE_SERVICE_ACCOUNT_KEY or "
            "GOOGLE_APPLICATION_CREDENTIALS; or `gcloud auth application-default login`) and "
            "the bucket's IAM (storage.objects.get to read, storage.objects.list to list)"
        )
    elif where.startswith("s3://") and said.startswith(": SignatureDoesNotMatch"):
        after = (
            "; the secret_access_key does not belong to access_key_id (check both, in "
            "store_options or AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY), or a proxy changed "
            "the request on its way"
        )
    elif where.startswith("s3://") and said.startswith(
        (": ExpiredToken", ": TokenRefreshRequired")
    ):
        # Mid-run, hours in: obstore renews only the credentials it fetches itself; keys
        # given with a token (`aws configure export-credentials`, SSO) are used as given.
        after = (
            "; the session's temporary credentials ran out: keys given with a token (store_"
            "options config token, or AWS_SESSION_TOKEN, as `aws configure export-credentials` "
            "writes them) are never renewed; give fresh ones and resume from the Loader's last "
            "state_dict(), or, for runs that outlast them, leave the keys to a source obstore "
            "renews (AWS_ROLE_ARN with AWS_WEB_IDENTITY_TOKEN_FILE, or an instance or task role)"
        )
    elif where.startswith("s3://") and (
        said in ("", ": AccessDenied") or said.startswith(": AccessDenied:")
    ):
        # S3 answers 403 AccessDenied, not 404, for a key that does not exist when the
        # credentials may not list the bucket, and a HEAD's 403 has no body to say why:
        # "access denied" alone sent users to their keys for a mistyped name.
        after = (
            "; check the credentials (store_options access_key_id/secret_access_key, or "
            "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY) and the bucket's policy (s3:GetObject "
            "to read, s3:ListBucket to list), and the key's name: S3 answers 403, not 404, "
            "also for a key that does not exist when the credentials may not list the bucket"
        )
    # S3's hints after obstore's words: the store's own code and words come first.
    return PermissionDeniedError(f"{where}: access denied{said}{hint} ({brief}){after}")
