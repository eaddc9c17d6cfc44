"""OpenAI's chat API: protocol.py (its bodies), serving.py (conversion), routes.py."""
