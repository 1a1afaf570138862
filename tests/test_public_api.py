"""Every public module lists its names in a sorted, complete ``__all__``."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
import types

import pytest

import headrace

# Checked only where their framework is installed (the test install has both).
OPTIONAL = {"headrace.torch": "torch", "headrace.jax": "jax"}


def _public_modules() -> list[str]:
    names = ["headrace"]
    for info in pkgutil.walk_packages(headrace.__path__, "headrace."):
        parts = info.name.split(".")
        if any(p.startswith("_") for p in parts):
            continue
        if info.name in OPTIONAL and importlib.util.find_spec(OPTIONAL[info.name]) is None:
            continue
        names.append(info.name)
    return names


@pytest.mark.parametrize("name", _public_modules())
def test_all_is_sorted_and_complete(name: str) -> None:
    module = importlib.import_module(name)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{name} has no __all__"
    assert list(exported) == sorted(exported), f"{name}.__all__ is not sorted"
    public = {
        k
        for k, v in vars(module).items()
        if not k.startswith("_")
        and not isinstance(v, types.ModuleType)
        # The adapters use the loader's names without offering them: theirs are their own.
        and getattr(v, "__module__", name).startswith(name if name in OPTIONAL else "headrace")
        and k not in {"annotations"}
    }
    missing = public - set(exported)
    assert not missing, f"{name}: public names missing from __all__: {sorted(missing)}"
    for k in exported:
        assert hasattr(module, k), f"{name}.__all__ names {k!r}, which does not exist"


def test_a_missing_name_of_a_lazy_module_is_an_attribute_error() -> None:
    import headrace.io

    with pytest.raises(AttributeError, match=r"module 'headrace.io' has no attribute 'Nope'"):
        _ = headrace.io.Nope  # type: ignore[attr-defined]
    assert not hasattr(headrace.io, "Nope")  # hasattr and getattr(..., default) work


@pytest.mark.parametrize(
    ("module", "package"), [("headrace.torch", "torch"), ("headrace.jax", "jax")]
)
def test_the_adapter_of_a_framework_not_installed_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch, module: str, package: str
) -> None:
    # Fault injection: the framework made unimportable, as where it is not installed.
    # The error was Python's own, "No module named 'jax'", with no hint of the extra.
    monkeypatch.setitem(sys.modules, package, None)
    monkeypatch.delitem(sys.modules, module, raising=False)
    with pytest.raises(ModuleNotFoundError) as exc:
        importlib.import_module(module)
    assert str(exc.value) == (
        f"{module} needs {package}, which is not installed: pip install 'headrace[{package}]' "
        f"(or {package} built for your accelerator, from {package}'s install guide)"
    )
    assert exc.value.name == package  # what code that catches ImportError looks at


def test_reads_in_flight_are_public_where_a_watchdog_looks() -> None:
    import headrace.io
    from headrace.pipeline import Loader

    assert {"ReadInFlight", "reads_in_flight"} <= set(headrace.io.__all__)
    assert Loader.reads_in_flight.__doc__ and "oldest first" in Loader.reads_in_flight.__doc__
    assert isinstance(headrace.io.reads_in_flight(), list)
