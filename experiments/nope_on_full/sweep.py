"""Finding 4's runs: the small-window (4 of T = 64) SWA/full hybrid with RoPE on every layer
and with NoPE on its full-attention layers only, and the full-attention baseline; three
seeds each, toy-xs at 30 N tokens."""

from experiments.toy_study.config import SEEDS, get_config, point
from hybrid_jax.launch.grid import Sweep


def get_sweep():
  grid = [point(pattern="SF", window="small", pos_full=pos, seed=s) for s in SEEDS
          for pos in ("rope", "nope")]
  grid += [point(pattern="F", seed=s) for s in SEEDS]
  return Sweep(base=get_config(), grid=grid)
