"""The ``ferryman`` command: the platform's one composition root, at the top of the house.

Installed, the platform has one import name, this package; its other rooms (the kernel,
registry, job stores, services, console) lie in its private ``rooms/`` folder, which is put
on this process's path here, and on its children's through ``PYTHONPATH``, so none of their
names shadows a module of an app the platform is installed beside. In a source checkout the
rooms are the checkout's top-level folders.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path


def rooms() -> Path:
    """Where the platform's rooms are: the installed private folder, else the checkout."""
    here = Path(__file__).resolve().parent
    installed = here / "rooms"
    return installed if installed.is_dir() else here.parent


ROOMS = str(rooms())
if ROOMS not in sys.path:
    sys.path.insert(0, ROOMS)
if ROOMS not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (ROOMS, os.environ.get("PYTHONPATH"))))
