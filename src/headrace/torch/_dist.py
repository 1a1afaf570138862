"""This process's rank and world size, as given or from ``torch.distributed``."""

from __future__ import annotations

import torch.distributed as dist

from headrace.errors import ConfigError

__all__ = ["dist_rank_world"]


def dist_rank_world(rank: int | None = None, world_size: int | None = None) -> tuple[int, int]:
    """``(rank, world_size)``: as given, else from ``torch.distributed``, else ``(0, 1)``."""
    if (rank is None) != (world_size is None):
        raise ConfigError(
            f"give both rank and world_size, or neither (got {rank=}, {world_size=})."
        )
    if rank is not None and world_size is not None:
        return rank, world_size
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1
