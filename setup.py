"""The platform distribution's packages (metadata is in pyproject.toml).

It installs one import name, ``ferryman_cli`` (the ``ferryman`` command). Every other room
of the platform goes into that package's private ``rooms/`` folder under its own name, so
``router``, ``registry`` and the rest never land in site-packages where they would shadow an
app's own modules; ``ferryman_cli`` puts the folder on the platform's own path when it runs.
"""

from setuptools import find_packages, setup

ROOMS = (
    "ferryman_kernel",
    "registry",
    "ferryman_jobs",
    "router",
    "batcher",
    "gpu_node",
    "ferryman_quota",
    "ferryman_rollouts",
    "admin_ui",
)
PRIVATE = "ferryman_cli.rooms"

packages = find_packages(include=["ferryman_cli", "ferryman_cli.*"])
package_dir = {}
for room in ROOMS:
    for name in find_packages(include=[room, f"{room}.*"]):
        packages.append(f"{PRIVATE}.{name}")
    package_dir[f"{PRIVATE}.{room}"] = room

setup(
    packages=packages,
    package_dir=package_dir,
    package_data={f"{PRIVATE}.registry": ["migrations/*.mako", "migrations/versions/*.py"]},
)
