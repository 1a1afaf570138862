"""A slowfs read fault whose glob holds ':' survives the trip through the command line.

``to_spec`` wrote such a glob bare, and the server read what followed its last ':' as
a byte range: ``SlowMount(..., fail_reads=[ReadFault(glob="t/12:00.bin")])`` started
a server that refused its own command line ("'00.bin' is not a byte range")."""

from __future__ import annotations

import argparse

import pytest

from headrace.emulate import SlowFSConfig
from headrace.emulate import _cli as emulate_cli
from headrace.emulate._slowfs import config_from_args
from headrace.emulate._slowfs_faults import ReadFault
from headrace.errors import ConfigError


def _through_the_cli(config: SlowFSConfig) -> SlowFSConfig:
    parser = argparse.ArgumentParser()
    emulate_cli.configure(parser)
    return config_from_args(parser.parse_args(["slowfs", "SRC", "MNT", *config.to_argv()]))


@pytest.mark.parametrize(
    "fault",
    [
        ReadFault(glob="logs/2024-01-01T12:00.bin"),
        ReadFault(glob="a:10-20"),  # a file so named, every byte of it
        ReadFault(glob="a:b", start=5),
        ReadFault(glob="a:b", end=7),
        ReadFault(glob="plain.bin"),
    ],
)
def test_a_fault_round_trips_through_its_spec_and_the_cli(fault: ReadFault) -> None:
    assert ReadFault.parse(fault.to_spec()) == fault
    config = SlowFSConfig(fail_reads=(fault,))
    assert _through_the_cli(config) == config


def test_a_plain_glob_is_still_written_bare() -> None:
    assert ReadFault(glob="*.bin").to_spec() == "*.bin"
    assert ReadFault(glob="t:1.bin").to_spec() == "t:1.bin:0-"


@pytest.mark.parametrize(
    ("glob", "meant"),
    [
        ("./data/x.bin", "data/x.bin"),
        ("data//x.bin", "data/x.bin"),
        ("data/", "data/*"),
        (".", "*"),
    ],
)
def test_a_glob_that_could_never_match_is_refused_with_the_one_meant(glob: str, meant: str) -> None:
    # Matched against "data/x.bin" as the kernel gives it: no READ ever failed.
    with pytest.raises(ConfigError, match=r"has a '\.' or empty part") as info:
        ReadFault.parse(glob)
    assert f"write it as {meant!r}" in str(info.value)
    assert ReadFault(glob=meant).matches("data/x.bin")
