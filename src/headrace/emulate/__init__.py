"""emulate layer."""

__all__: list[str] = []
