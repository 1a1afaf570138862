"""WebDataset tar shards: cut at every header, flipped, sizes forged (checksums fixed).

50 flips in the headers a target (120 under ``HEADRACE_FUZZ_ALL=1``): the module took
12 s of CPU alone with 120, 7 s with 50 (2c, 2026-12-07).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from _harness import check
from _mutate import FUZZ_ALL, Case, field_values, flips, truncations
from _targets import TARGETS


def _headers(data: bytes) -> list[int]:
    """The offsets of the shard's member headers (a ustar magic at 257)."""
    return [a for a in range(0, len(data), 512) if data[a + 257 : a + 262] == b"ustar"]


def _forged_sizes(data: bytes, headers: list[int]) -> list[Case]:
    """Each header's size field forged, its checksum made right again (a valid header)."""
    out = []
    for h in headers:
        size = int(data[h + 124 : h + 135], 8)
        for v in field_values(size):
            if not 0 <= v < 8**11:
                continue
            block = bytearray(data[h : h + 512])
            block[124:136] = b"%011o\0" % v
            block[148:156] = b" " * 8
            block[148:156] = b"%06o\0 " % sum(block)
            forged = data[:h] + bytes(block) + data[h + 512 :]
            out.append(Case(label=f"size@{h}={v}", data=forged, strict=False))
    return out


@pytest.mark.parametrize("target", ["files_tar", "files_tar_samples", "files_tar_pax"])
def test_tar(target: str, tmp_path: Path) -> None:
    data = TARGETS[target].pristine()
    headers = _headers(data)
    cases = truncations(data, [m for h in headers for m in (h, h + 512)])
    # The headers and the block after each (a PAX header's records: under no checksum).
    cases += flips(
        data, seed=4, count=120 if FUZZ_ALL else 50, regions=[(h, h + 1024) for h in headers]
    )
    cases += _forged_sizes(data, headers)
    seen = check(target, cases, tmp_path)
    # Every cut is refused (strict), and a flip in a header breaks its checksum.
    assert seen["error:FormatError"] > len(cases) // 2
