"""Finding 3's runs: SWA/full 1:1 hybrids with a small, a medium and a large window (4, 16,
32 of T = 64), and the full-attention baseline, three seeds each, toy-xs at 30 N tokens."""

from experiments.toy_study.config import SEEDS, get_config, point
from hybrid_jax.launch.grid import Sweep


def get_sweep():
  grid = [point(pattern="SF", window=w, seed=s) for s in SEEDS
          for w in ("small", "medium", "large")]
  grid += [point(pattern="F", seed=s) for s in SEEDS]
  return Sweep(base=get_config(), grid=grid)
