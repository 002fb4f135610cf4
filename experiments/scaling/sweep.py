"""Finding 1's runs: full attention, SWA/full hybrids with a small, a medium and a large
window, and a Lightning/full hybrid, at three toy sizes (~0.025M, 0.1M, 0.2M non-embedding
parameters) x four token budgets (3.75, 7.5, 15, 30 N), one cosine run per budget, seed 0;
the largest budget of the largest size at three seeds (the runs the other findings share).

The emergence comparison (toy-xs, 30 N, three seeds) also takes the architectures outside the
scaling grid: the Mamba-2 and Gated DeltaNet hybrids (MF, GF), the 1:3 SWA hybrid (SSSF) and
the head-wise hybrid (H), both with the medium window. Three seeds, not five: five seeds of
the nine architectures would take ~2 h of a 2-core CPU on top of the grid's ~1.5 h."""

from experiments.toy_study.config import SEEDS, get_config, point
from hybrid_jax.launch.grid import Sweep

SIZES = ("toy-3xs", "toy-2xs", "toy-xs")
BUDGETS = (3.75, 7.5, 15.0, 30.0)
ARCHS = (("F", None), ("SF", "small"), ("SF", "medium"), ("SF", "large"), ("LF", None))
EMERGENCE_ONLY = (("MF", None), ("GF", None), ("SSSF", "medium"), ("H", "medium"))
EMERGENCE_ARCHS = ARCHS + EMERGENCE_ONLY


def get_sweep():
  grid = [point(pattern=p, window=w, size="toy-xs", budget=BUDGETS[-1], seed=s)
          for s in SEEDS for p, w in ARCHS]
  grid += [point(pattern=p, window=w, size=size, budget=b)
           for size in SIZES for b in BUDGETS for p, w in ARCHS
           if not (size == "toy-xs" and b == BUDGETS[-1])]
  grid += [point(pattern=p, window=w, size="toy-xs", budget=BUDGETS[-1], seed=s)
           for s in SEEDS for p, w in EMERGENCE_ONLY]
  return Sweep(base=get_config(), grid=grid)
