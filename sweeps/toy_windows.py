"""Toy CPU sweep: full attention vs SWA hybrids at three windows, two seeds (minutes on 2 cores)."""

from hybrid_jax.configs.default import get_config
from hybrid_jax.launch.grid import Sweep, axis, product


def get_sweep():
  base = get_config()
  base.train.tokens = 200 * 8 * 256
  return Sweep(base=base, grid=(
      product(axis("model.pattern", ["F"]), axis("train.seed", [0, 1])) +
      product(axis("model.pattern", ["SF"]), axis("model.window", [8, 32, 128]),
              axis("train.seed", [0, 1]))))
