"""plan layer."""

__all__: list[str] = []
