"""obstore's Rust panics (pyo3's PanicException, a BaseException) as classify() names them."""

from __future__ import annotations

from headrace.errors import StorageError, TransientStorageError
from headrace.io._retry import classify, is_panic

# Fault injection: pyo3 makes PanicException at run time; one of the same name and module.
PanicException = type("PanicException", (BaseException,), {"__module__": "pyo3_runtime"})


def test_a_short_body_panic_is_a_body_cut_short_and_retried() -> None:
    exc = PanicException("range start must not be greater than end: 3000 <= 1550")
    assert is_panic(exc)
    err, retry = classify(exc, "s3://b/k, bytes [0, 3100)")
    assert retry and isinstance(err, TransientStorageError)
    assert str(err).startswith("s3://b/k, bytes [0, 3100): response body was cut short")


def test_any_other_panic_is_named_and_not_retried() -> None:
    err, retry = classify(PanicException("called `Option::unwrap()` on a `None`"), "s3://b/k")
    assert not retry and type(err) is StorageError
    assert "s3://b/k: obstore failed (a panic in its Rust code" in str(err)
    assert not is_panic(KeyboardInterrupt())
