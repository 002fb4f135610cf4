"""Finding 1: the design changes how fast long-context ability emerges."""
