"""The platform distribution's packages (metadata is in pyproject.toml).

It installs one import name, ``ferryman_server``. Its rooms are the checkout's top-level
folders (router/, registry/, kernel/...); ``ferryman_server/`` holds a link to each, so
setuptools finds them as ``ferryman_server.router`` and the rest and the wheel holds them
there, as real files, under that one name.
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["ferryman_server", "ferryman_server.*"]),
    package_data={
        "ferryman_server": ["py.typed"],
        "ferryman_server.registry": ["migrations/*.mako", "migrations/versions/*.py"],
    },
)
