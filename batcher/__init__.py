"""The streaming batcher (``ferryman serve batcher``): queues, scheduler, coalescing, dispatch."""
