"""The built-in tool factories. Each lives in its own module; this package re-exports them."""

__all__: list[str] = []
