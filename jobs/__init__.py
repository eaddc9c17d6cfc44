"""Durable asynchronous jobs: the store the router queues them in and the batcher's workers
run them from (Redis Streams)."""
