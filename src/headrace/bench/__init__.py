"""bench layer."""

__all__: list[str] = []
