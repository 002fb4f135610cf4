"""Every run of the four findings, once, in the order that lets reports start early:

    hybrid-jax sweep submit experiments/all_findings.py --root runs/toy_study --parallel 2

first the three-seed toy-xs runs that findings 2-4 share (seed by seed, so a partial sweep
already holds whole seeds), then the scaling grid's other sizes and budgets, smallest
first. Each finding's ``run.py --no-train`` then reports from the shared root.
"""

from pathlib import Path

from experiments.toy_study.config import get_config
from hybrid_jax.launch.grid import Sweep, load_sweep

HERE = Path(__file__).parent
FINDINGS = ("scaling", "full_attention_carries_retrieval", "large_window_laziness", "nope_on_full")
SIZE_ORDER = {"toy-3xs": 0, "toy-2xs": 1, "toy-xs": 2}


def get_sweep():
  """The findings' grids, deduplicated; a run any of findings 2-4 uses comes first, by seed."""
  grids = {f: load_sweep(HERE / f / "sweep.py").grid for f in FINDINGS}
  shared = {_key(p) for f in FINDINGS[1:] for p in grids[f]}
  points = list({_key(p): p for f in FINDINGS for p in grids[f]}.values())
  points.sort(key=lambda p: (0, p["train.seed"]) if _key(p) in shared else
              (1, SIZE_ORDER[p["model.size"]], p["train.tokens_per_param"]))
  return Sweep(base=get_config(), grid=points)


def _key(point: dict) -> tuple:
  return tuple(sorted(point.items()))
