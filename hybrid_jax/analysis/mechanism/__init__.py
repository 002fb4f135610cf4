"""Mechanism analyses of a run's checkpoints (``hybrid-jax analyze ...``): retrieval-head
scores, their trace over training, receptive-field constraints, head ablation, layer-wise
probing and gradient influence. Each writes JSON and figures into ``<run>/analysis/``."""
