"""formats layer."""

__all__: list[str] = []
