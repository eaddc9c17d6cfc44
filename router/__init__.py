"""The router (``ferryman serve router``): the public Inference service."""
