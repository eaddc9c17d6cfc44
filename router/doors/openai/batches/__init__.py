"""OpenAI's batches API: protocol.py (its bodies), serving.py (conversion), routes.py."""
