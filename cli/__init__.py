"""The ``ferryman`` command: the platform's one composition root, at the top of the house
(``ferryman_server.cli``; nothing imports it)."""
