"""The generative platform fixture (``tests/generation_platform.py``)."""

from generation_platform import gen

__all__ = ["gen"]
