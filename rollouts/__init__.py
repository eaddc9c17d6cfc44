"""The rollout controller process: reads routers' counters, judges each step, moves the
weights through the registry's rollout writes (``ferryman serve rollouts``, or inside ``ferryman up``)."""
