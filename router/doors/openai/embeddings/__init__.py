"""OpenAI's embeddings API: protocol.py (its bodies), serving.py (conversion), routes.py."""
