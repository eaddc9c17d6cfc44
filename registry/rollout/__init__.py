"""Progressive rollouts: the registry object's writes, the pure decision of each check and
the controller that runs them (``ferryman serve rollouts``, or inside ``ferryman up``)."""
