"""Demo and test models, built locally (never downloaded): ``ferryman models demo``."""
