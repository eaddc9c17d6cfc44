"""The node: holds model versions on a device and runs batches (``ferryman serve node``)."""
