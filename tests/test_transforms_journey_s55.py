"""A torchvision user's RandomResizedCrop arguments, refused by name (session 55).

``v2.RandomResizedCrop(224, scale=(0.9, 0.1))`` warns "Scale and ratio should be of
kind (min, max)" and then fails at the first image with torch's "uniform_ expects to
return a [from, to) range". headrace refuses it when the transform is made; its message
said "scale must satisfy ..." without naming the transform, what scale is, or a value to
give.
"""

from __future__ import annotations

from typing import Any

import pytest

from headrace.errors import ConfigError
from headrace.transforms import RandomResizedCrop


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"scale": (0.9, 0.1)}, r"RandomResizedCrop scale .*area.*\(0\.9, 0\.1\).*\(0\.08, 1\.0\)"),
        ({"scale": (0.08, 1.5)}, r"RandomResizedCrop scale .*\(0\.08, 1\.5\).*e\.g\."),
        (
            {"ratio": (4 / 3, 3 / 4)},
            r"RandomResizedCrop ratio .*width / height.*\(3/4, 4/3\)",
        ),
    ],
)
def test_a_range_out_of_order_is_named_with_the_default(kw: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        RandomResizedCrop((224, 224), **kw)
