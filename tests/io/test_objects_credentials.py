"""Whose credentials an S3 store signs with: the keys given, or the environment's.

A small S3-speaking HTTP server on 127.0.0.1 answers every GET with a few bytes and
records the headers that carry credentials (the signature's key and the session
token); nothing checks the signatures, only what was sent.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from headrace.io import ObjectStore

BODY = b"0123456789"


class _Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # else a kept connection's answers wait ~40 ms for an ACK
    seen: list[dict[str, str]]

    def do_GET(self) -> None:
        self.seen.append(
            {
                "key": (self.headers.get("Authorization") or "").partition("Credential=")[2][:8],
                "token": self.headers.get("x-amz-security-token") or "",
            }
        )
        self.send_response(206)
        self.send_header("Content-Range", f"bytes 0-{len(BODY) - 1}/{len(BODY)}")
        self.send_header("Content-Length", str(len(BODY)))
        self.send_header("ETag", '"e"')
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("R", (_Recorder,), {"seen": seen}))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", seen
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def _sent(endpoint: str, seen: list[dict[str, str]], **options: object) -> dict[str, str]:
    with ObjectStore("s3://bucket/p", endpoint=endpoint, **options) as store:  # type: ignore[arg-type]
        assert bytes(store.get_range("x.bin", 0, len(BODY))) == BODY
    return seen[-1]


def test_keys_given_are_signed_without_the_environments_session_token(
    server: tuple[str, list[dict[str, str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A shell holding another account's temporary credentials (AWS SSO, assume-role)
    # and a lab MinIO's keys in store_options: obstore filled the token it lacked from
    # AWS_SESSION_TOKEN and signed MinIO's key with it, which MinIO answers with 403.
    # Before: {"key": "minio-ke", "token": "env-token"}.
    endpoint, seen = server
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "env-key-id")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "env-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "env-token")
    given = {"access_key_id": "minio-key", "secret_access_key": "minio-secret"}
    assert _sent(endpoint, seen, **given) == {"key": "minio-ke", "token": ""}
    # The environment's credentials whole, when none are given; a token given is sent.
    assert _sent(endpoint, seen) == {"key": "env-key-", "token": "env-token"}
    with_token = {**given, "config": {"token": "my-token"}}
    assert _sent(endpoint, seen, **with_token) == {"key": "minio-ke", "token": "my-token"}
    config_keys = {"config": {"aws_access_key_id": "cfg-key-id", "aws_secret_access_key": "s"}}
    assert _sent(endpoint, seen, **config_keys) == {"key": "cfg-key-", "token": ""}
    # The environment's own key given again (copied from os.environ): its token goes too.
    again = {"access_key_id": "env-key-id", "secret_access_key": "env-secret"}
    assert _sent(endpoint, seen, **again) == {"key": "env-key-", "token": "env-token"}


def test_an_azure_account_key_given_is_signed_with_not_the_environments_token(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # obstore tries a bearer token before an account key, and fills it from the
    # environment: a key given beside AZURE_STORAGE_TOKEN went out as "Bearer <token>".
    seen: list[str] = []

    class _Azure(_Recorder):
        def do_GET(self) -> None:
            seen.append((self.headers.get("Authorization") or "").split(" ")[0])
            self.send_response(206)
            self.send_header("Content-Range", f"bytes 0-{len(BODY) - 1}/{len(BODY)}")
            self.send_header("Content-Length", str(len(BODY)))
            self.send_header("Last-Modified", "Wed, 02 Dec 2026 12:00:00 GMT")
            self.send_header("ETag", '"e"')
            self.end_headers()
            self.wfile.write(BODY)

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Azure)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    key = "a2V5" * 11  # base64, as an account key is
    endpoint = f"http://127.0.0.1:{httpd.server_address[1]}/acct"
    monkeypatch.setenv("AZURE_STORAGE_TOKEN", "env-token")
    try:
        for config in (
            {"account_name": "acct", "account_key": key},
            {"account_name": "acct", "azure_storage_account_key": key},
            {"account_name": "acct"},  # none given: the environment's token
        ):
            with ObjectStore("az://box/p", endpoint=endpoint, config=config) as store:
                assert bytes(store.get_range("x.bin", 0, len(BODY))) == BODY
        assert seen == ["SharedKey", "SharedKey", "Bearer"]
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()
