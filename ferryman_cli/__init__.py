"""The ``ferryman`` command: the one composition root that may import every service."""
