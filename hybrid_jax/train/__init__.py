"""Training: optimizer, train step, run directory, checkpoints, the loop."""
