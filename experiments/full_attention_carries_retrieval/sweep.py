"""Finding 2's runs: the trained hybrids the mechanism analyses look into, the small-window
SWA/full hybrid (three seeds) and the Lightning/full hybrid (one seed, for lack of CPU
time), toy-xs at 30 N tokens."""

from experiments.toy_study.config import SEEDS, get_config, point
from hybrid_jax.launch.grid import Sweep


def get_sweep():
  grid = [point(pattern="SF", window="small", seed=s) for s in SEEDS]
  grid += [point(pattern="LF", seed=0)]
  return Sweep(base=get_config(), grid=grid)
