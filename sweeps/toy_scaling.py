"""Toy CPU scaling grid: 3 sizes x 4 token budgets (multiples of N) x {full, SWA-32 hybrid}.

The budgets are small multiples of N because toy models are tiny; the grid's shape is the
paper's (size x architecture x budget), so ``sweep collect`` + ``fit-scaling`` work on it.
"""

from hybrid_jax.configs.default import get_config
from hybrid_jax.launch.grid import Sweep, axis, product


def get_sweep():
  base = get_config()
  base.train.tokens = None
  base.train.tokens_per_param = 2.0
  return Sweep(base=base, grid=product(
      axis("model.size", ["toy-xs", "toy-s", "toy-m"]),
      axis("model.pattern", ["F", "SF"]),
      axis("train.tokens_per_param", [0.5, 1.0, 2.0, 4.0])))
