"""The registry: Ferryman's configuration of record.

Tables (``registry.tables``), migrations (``registry.migrations``), and the one
write path (``registry.writer.RegistryWriter``) that validates each change, bumps
the config revision and writes an audit event. Readers use ``registry.reader``.
"""
