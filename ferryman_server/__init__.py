"""The Ferryman platform (the ``ferryman-server`` distribution): one import name.

Every room of the platform is a subpackage of this one: ``ferryman_server.kernel`` (the
service kernel), ``.registry``, ``.jobs`` (durable job stores), the services ``.router``,
``.batcher``, ``.gpu_node``, ``.quota``, ``.rollouts`` and ``.admin_ui`` (the console), and
``.cli`` (the ``ferryman`` command, the one composition root). In the source checkout each
room is a top-level folder and this package holds a link to each, so one file has one name
in the checkout, in the wheel, in stored handler names and for every tool, and no module of
an app installed beside the platform (its own ``router.py`` or ``registry/``) is shadowed.
"""
