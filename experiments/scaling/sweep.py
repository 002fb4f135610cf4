"""Finding 1's runs: full attention, SWA/full hybrids with a small, a medium and a large
window, and a Lightning/full hybrid, at three toy sizes (~0.025M, 0.1M, 0.2M non-embedding
parameters) x four token budgets (3.75, 7.5, 15, 30 N), one cosine run per budget, seed 0;
the largest budget of the largest size also at seeds 1 and 2 (the runs the other findings
share), so the emergence comparison has three seeds, except for the Lightning hybrid: one
seed, for lack of CPU time (the report says so)."""

from experiments.toy_study.config import SEEDS, get_config, point
from hybrid_jax.launch.grid import Sweep

SIZES = ("toy-3xs", "toy-2xs", "toy-xs")
BUDGETS = (3.75, 7.5, 15.0, 30.0)
SEEDS_OF = {"LF": (0,)}
ARCHS = (("F", None), ("SF", "small"), ("SF", "medium"), ("SF", "large"), ("LF", None))


def get_sweep():
  grid = [point(pattern=p, window=w, size="toy-xs", budget=BUDGETS[-1], seed=s)
          for s in SEEDS for p, w in ARCHS if s in SEEDS_OF.get(p, SEEDS)]
  grid += [point(pattern=p, window=w, size=size, budget=b)
           for size in SIZES for b in BUDGETS for p, w in ARCHS
           if not (size == "toy-xs" and b == BUDGETS[-1])]
  return Sweep(base=get_config(), grid=grid)
