"""The registry: Ferryman's configuration of record.

Tables (``ferryman_server.registry.tables``), migrations
(``ferryman_server.registry.migrations``), and the one
write path (``ferryman_server.registry.writer.RegistryWriter``) that validates each change, bumps
the config revision and writes an audit event. Readers use ``ferryman_server.registry.reader``.
"""
