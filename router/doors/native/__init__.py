"""The native door: ``ferryman.v1.Inference`` and ``ferryman.v1.Jobs`` over gRPC."""
