"""The upstream URL of a LatencyProxy: a port that is no port, or a path the proxy would
leave out, is a ConfigError naming the URL, not urllib's ValueError or a silent miss."""

from __future__ import annotations

import pytest

from headrace.emulate import LatencyProxy
from headrace.emulate._proxy import main
from headrace.errors import ConfigError


@pytest.mark.parametrize(
    ("upstream", "said"),
    [
        ("http://127.0.0.1:abc", "Port could not be cast to integer value as 'abc'"),
        ("http://127.0.0.1:99999", "Port out of range 0-65535"),
        ("http://127.0.0.1:0", "port 0"),  # was taken for port 80
    ],
)
def test_an_upstream_port_that_is_no_port_is_refused_naming_it(upstream: str, said: str) -> None:
    with pytest.raises(ConfigError, match=r"has no valid port \(") as info:
        LatencyProxy(upstream)
    assert repr(upstream) in str(info.value) and said in str(info.value)


@pytest.mark.parametrize(
    "upstream", ["http://127.0.0.1:9000/minio", "http://127.0.0.1:9000/?x=1", "http://h:1/#f"]
)
def test_an_upstream_with_a_path_is_refused(upstream: str) -> None:
    # Each request went upstream with its own path: the "/minio" was dropped silently.
    with pytest.raises(ConfigError, match="has a path; the proxy forwards each request's own"):
        LatencyProxy(upstream)


@pytest.mark.parametrize(
    ("upstream", "port"),
    [("http://127.0.0.1:9000/", 9000), ("http://127.0.0.1", 80), ("http://h:1", 1)],
)
def test_an_upstream_of_host_and_port_is_taken(upstream: str, port: int) -> None:
    assert LatencyProxy(upstream)._up_port == port


def test_the_proxy_command_says_a_bad_upstream_in_a_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["--upstream", "http://127.0.0.1:abc"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("headrace-proxy: Proxy upstream 'http://127.0.0.1:abc' has no valid")
    assert "Traceback" not in err


@pytest.mark.parametrize("port", [70000, -1])
def test_a_listening_port_out_of_range_is_refused_in_a_line(
    port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    # bind()'s OverflowError came out of start() as a traceback.
    with pytest.raises(
        ConfigError, match=rf"port must be in 0-65535, 0 for a free one \(got {port}\)"
    ):
        LatencyProxy("http://127.0.0.1:9", port=port)
    assert main(["--upstream", "http://127.0.0.1:9", "--port", str(port)]) == 2
    assert "port must be in 0-65535" in capsys.readouterr().err
