"""``ferryman bench``: a load generator for the Inference API (closed and open loop)."""
