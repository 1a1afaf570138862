"""pipeline layer."""

__all__: list[str] = []
