"""Ferryman: a gRPC-native, multi-tenant inference platform for PyTorch models.

Tenant apps import the client SDK from here; every service imports the shared
config, telemetry and gRPC helpers from here.
"""

__version__ = "0.1.0"
