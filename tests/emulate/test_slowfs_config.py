"""SlowFSConfig validation and its round trip through the command line."""

from __future__ import annotations

import argparse

import pytest

from headrace.emulate import SlowFSConfig
from headrace.emulate import _cli as emulate_cli
from headrace.emulate._slowfs import config_from_args
from headrace.errors import ConfigError


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    emulate_cli.configure(parser)
    return parser.parse_args(argv)


def test_to_argv_round_trips_through_the_cli():
    config = SlowFSConfig(
        read_latency_ms=10.5,
        open_latency_ms=150,
        stat_latency_ms=75,
        mbps=50,
        max_background=128,
        max_threads=32,
        direct_io=True,
        stats_interval_s=0.1,
    )
    args = _parse(["slowfs", "SRC", "MNT", *config.to_argv()])
    assert args.emulator == "slowfs"
    assert (args.src, args.mnt) == ("SRC", "MNT")
    assert config_from_args(args) == config


def test_cli_defaults_are_the_config_defaults():
    assert config_from_args(_parse(["slowfs", "a", "b"])) == SlowFSConfig()


def test_emulator_is_required(capsys):
    with pytest.raises(SystemExit) as info:
        _parse([])
    assert info.value.code == 2
    assert "EMULATOR" in capsys.readouterr().err


def test_every_registered_emulator_has_configure_and_run():
    import importlib

    for name, (module_name, help_text) in emulate_cli.EMULATORS.items():
        module = importlib.import_module(module_name)
        assert callable(module.configure) and callable(module.run), name
        assert help_text


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("read_latency_ms", -1.0),
        ("open_latency_ms", float("nan")),
        ("stat_latency_ms", -0.5),
        ("mbps", float("inf")),
        ("read_latency_ms", "10"),
        ("mbps", True),
        ("max_background", 0),
        ("max_background", 70000),
        ("max_threads", 0),
        ("max_threads", 2.5),
        ("direct_io", 1),
        ("stats_interval_s", 0.0),
    ],
)
def test_bad_values_are_refused_with_the_field_and_value(field, value):
    with pytest.raises(ConfigError, match=rf"SlowFSConfig\.{field} .*got"):
        SlowFSConfig(**{field: value})


def test_config_is_frozen_and_keyword_only():
    with pytest.raises(TypeError):
        SlowFSConfig(10.0)  # type: ignore[misc]
    with pytest.raises(AttributeError):
        SlowFSConfig().mbps = 5  # type: ignore[misc]
