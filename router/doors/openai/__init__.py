"""The OpenAI-compatible door, one folder per API: protocol models, conversion (serving), routes."""
