"""The project's promises about itself: README's two set-up commands, the CI script
that runs the test one verbatim, and the ``headrace`` console script."""

from __future__ import annotations

import importlib
import os
import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def setup_commands() -> list[str]:
    """The shell blocks of README's "Set up on a fresh machine" section."""
    text = (ROOT / "README.md").read_text()
    section = text.split("\n## Set up on a fresh machine\n", 1)[1].split("\n## ", 1)[0]
    return [b.strip() for b in re.findall(r"^```bash\n(.*?)^```$", section, re.M | re.S)]


def test_readme_sets_up_with_two_one_line_commands() -> None:
    main_job, tests = setup_commands()  # exactly two
    assert "\n" not in main_job and "\n" not in tests
    # The first runs the main job on its built-in default: `headrace bench`, no arguments.
    assert main_job.endswith("&& headrace bench")
    assert tests.endswith("python -m pytest -q")


def test_ci_runs_the_readme_test_command_verbatim_then_lint_and_types() -> None:
    script = ROOT / ".ci" / "run"
    assert os.access(script, os.X_OK)
    subprocess.run(["bash", "-n", str(script)], check=True)  # it parses
    lines = [ln.strip() for ln in script.read_text().splitlines()]
    run = [ln for ln in lines if ln and not ln.startswith("#")]
    assert "set -euo pipefail" in run  # a failing step fails CI
    _, tests = setup_commands()
    assert tests in run
    checks = run[run.index(tests) + 1 :]
    assert "python -m ruff check src tests benchmarks" in checks
    assert "python -m ruff format --check src tests benchmarks" in checks
    assert "python -m mypy" in checks
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert pyproject["tool"]["mypy"]["strict"] is True
    assert "src" in str(pyproject["tool"]["mypy"]["files"])


def test_the_console_script_is_the_cli_and_numpy_the_only_dependency() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    module, _, name = project["scripts"]["headrace"].partition(":")
    main = getattr(importlib.import_module(module), name)
    assert main(["bench", "--list"]) == 0
    assert [re.split(r"[<>=!~ ]", d)[0] for d in project["dependencies"]] == ["numpy"]
    assert project["requires-python"] == ">=3.11"
