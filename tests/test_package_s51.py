"""What a user installs: the extras README names are pyproject's, every extra a message
tells a user to install exists, and the wheel carries every data file of the package."""

from __future__ import annotations

import fnmatch
import re
import tomllib
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())
EXTRAS = PROJECT["project"]["optional-dependencies"]


def _readme_extras() -> tuple[set[str], set[str]]:
    """README's "Extras:" sentence: the extras it names, and those `all` leaves out."""
    text = " ".join((ROOT / "README.md").read_text().split())
    sentence = re.search(r"Extras: (.*?); `all` is every extra but (.*?) \(", text)
    assert sentence, "README.md: no 'Extras: ...; `all` is every extra but ...' sentence"
    named = set(re.findall(r"`([a-z0-9-]+)`", sentence.group(1)))
    return named, set(re.findall(r"`([a-z0-9-]+)`", sentence.group(2)))


def test_readme_names_every_extra_and_what_all_leaves_out() -> None:
    named, left_out = _readme_extras()
    assert named == set(EXTRAS) - {"all", "test"}
    all_extras = re.fullmatch(r"headrace\[(.*)\]", EXTRAS["all"][0])
    assert all_extras and len(EXTRAS["all"]) == 1, EXTRAS["all"]
    assert set(all_extras.group(1).split(",")) == named - left_out


def test_every_extra_a_message_names_exists() -> None:
    told: dict[str, set[str]] = {}
    for path in [*(ROOT / "src").rglob("*.py"), ROOT / "README.md", *(ROOT / "docs").glob("*.md")]:
        for extras in re.findall(r"headrace\[([a-z0-9,-]+)\]", path.read_text()):
            for extra in extras.split(","):
                told.setdefault(extra, set()).add(str(path.relative_to(ROOT)))
    assert {"objects", "arrow", "hdf5", "images", "torch"} <= set(told), sorted(told)
    unknown = {extra: sorted(paths) for extra, paths in told.items() if extra not in EXTRAS}
    assert not unknown, f"pip install 'headrace[...]' of no such extra: {unknown}"


def test_package_data_covers_every_data_file() -> None:
    """setuptools puts a package's non-Python files in the wheel only where
    ``package-data`` names them: a workload TOML, DLIO YAML or the report schema left
    out is a ``headrace bench`` that works from the clone and not from the wheel."""
    patterns = PROJECT["tool"]["setuptools"]["package-data"]["headrace"]
    package = ROOT / "src" / "headrace"
    data = [
        p.relative_to(package).as_posix()
        for p in package.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    ]
    assert "py.typed" in data and "bench/report.schema.json" in data
    assert any(d.startswith("bench/workloads/dlio/") for d in data)
    # setuptools' glob: '*' does not cross a '/'.
    missed = [
        d
        for d in data
        if not any(fnmatch.fnmatch(d, p) and d.count("/") == p.count("/") for p in patterns)
    ]
    assert not missed, f"not in [tool.setuptools.package-data], so not in the wheel: {missed}"


def test_pyproject_builds_without_setuptools_deprecations(monkeypatch: pytest.MonkeyPatch) -> None:
    """A build's setuptools is the newest (``requires = ["setuptools>=..."]``, in an
    isolated environment): one that warns of a deprecated field today refuses it once
    the deprecation ends (``project.license`` as a table: by 2027-02-18)."""
    setuptools = pytest.importorskip("setuptools")
    from setuptools.config.pyprojecttoml import apply_configuration
    from setuptools.dist import Distribution

    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.skip(f"setuptools {setuptools.__version__}: SPDX licenses need 77 or newer")
    monkeypatch.chdir(ROOT)  # readme = "README.md" is read relative to the project
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        dist = apply_configuration(Distribution(), ROOT / "pyproject.toml")
    deprecated = [
        str(w.message).split("\n")[0] for w in caught if "Deprecat" in w.category.__name__
    ]
    assert not deprecated, deprecated
    assert dist.metadata.license_expression == "Apache-2.0"
    build = PROJECT["build-system"]["requires"]
    assert build == ["setuptools>=77"], build  # the oldest that reads an SPDX license
