"""The Open Inference Protocol v2 door: gRPC (servicer.py) and REST (rest/), sharing its
tensor conversions (tensors.py, convert.py)."""
