"""Finding 2's runs: the trained hybrids the mechanism analyses look into, the SWA/full
hybrids with a small, a medium and a large window (three seeds each: the medium and large
windows reach beyond the 4-token cap, so capping them is a test that can fail) and the
Lightning/full hybrid (one seed, for lack of CPU time), toy-xs at 30 N tokens. Every one
of them is also a run of the other findings (one shared root)."""

from experiments.toy_study.config import SEEDS, WINDOWS, get_config, point
from hybrid_jax.launch.grid import Sweep

LF_SEEDS = (0,)    # the Lightning hybrid's analysed seeds


def get_sweep():
  grid = [point(pattern="SF", window=w, seed=s) for s in SEEDS for w in WINDOWS]
  grid += [point(pattern="LF", seed=s) for s in LF_SEEDS]
  return Sweep(base=get_config(), grid=grid)
