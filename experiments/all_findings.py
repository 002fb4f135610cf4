"""Every run of the four findings, once, in the order that lets reports start early:

    hybrid-jax sweep submit experiments/all_findings.py --root runs/toy_study --parallel 2

first the three-seed toy-xs runs that findings 2-4 share (seed by seed, so a partial sweep
already holds whole seeds), then the scaling grid's other sizes and budgets, smallest
first. Each finding's ``run.py --no-train`` then reports from the shared root.
"""

import importlib.util
from pathlib import Path

from hybrid_jax.configs.toy_study import SEEDS, get_config, point
from hybrid_jax.launch.grid import Sweep

HERE = Path(__file__).parent
FINDINGS = ("scaling", "full_attention_carries_retrieval", "large_window_laziness", "nope_on_full")
SIZE_ORDER = {"toy-3xs": 0, "toy-2xs": 1, "toy-xs": 2}


def _grid(finding):
  spec = importlib.util.spec_from_file_location(f"_sweep_{finding}", HERE / finding / "sweep.py")
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_sweep().grid


def get_sweep():
  shared = []
  for s in SEEDS:
    shared += [point(pattern="SF", window="small", seed=s),
               point(pattern="SF", window="small", pos_full="nope", seed=s),
               point(pattern="F", seed=s),
               point(pattern="SF", window="medium", seed=s),
               point(pattern="SF", window="large", seed=s)]
    if s == 0:
      shared.append(point(pattern="LF", seed=0))
  seen = {tuple(sorted(p.items())) for p in shared}
  rest = []
  for finding in FINDINGS:
    for p in _grid(finding):
      key = tuple(sorted(p.items()))
      if key not in seen:
        seen.add(key)
        rest.append(p)
  rest.sort(key=lambda p: (SIZE_ORDER[p["model.size"]], p["train.tokens_per_param"]))
  return Sweep(base=get_config(), grid=shared + rest)
