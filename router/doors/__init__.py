"""The front doors: converter-only modules over the gateway, one folder per protocol."""
