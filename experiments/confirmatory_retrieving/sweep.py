"""Every run of finding 2's second confirmatory part (``rules.py``): GF and SF w=8, 7 fresh
seeds each, toy-xs at 30 N, evaluated as the first set is:

    hybrid-jax sweep submit experiments/confirmatory_retrieving/sweep.py --root runs/confirmatory_retrieving --parallel 2
"""

from experiments.confirmatory.protocol import EVAL_TASKS
from experiments.confirmatory_retrieving.rules import points
from experiments.toy_study.config import get_config
from hybrid_jax.launch.grid import Sweep

ROOT = "runs/confirmatory_retrieving"


def get_sweep():
  base = get_config()
  base.eval.tasks = ",".join(EVAL_TASKS)
  return Sweep(base=base, grid=points())
