"""Ferryman's client SDK and wire contract (``ferryman.v1`` stubs, errors, tensors).

Tenant apps use ``ferryman.Client`` and ``ferryman.AsyncClient``. The platform (services,
registry, console, the ``ferryman`` command) is a separate distribution built on top.
"""

__version__ = "0.1.0"

from ferryman.sdk import *  # noqa: F403  (the SDK is the package's public face)
from ferryman.sdk import __all__ as _sdk_names

__all__ = [*_sdk_names, "__version__"]
