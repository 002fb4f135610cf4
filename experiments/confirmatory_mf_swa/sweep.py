"""Every run of the confirmatory set's third part (``rules.py``): the SWA hybrid in the
pilot's recipe and MF, 7 fresh seeds each, toy-xs at 30 N, evaluated as the first set is and
on kv_recall_offset besides:

    hybrid-jax sweep submit experiments/confirmatory_mf_swa/sweep.py --root runs/confirmatory_mf_swa --parallel 2
"""

from experiments.confirmatory_mf_swa.rules import EVAL_TASKS, points
from experiments.toy_study.config import get_config
from hybrid_jax.launch.grid import Sweep

ROOT = "runs/confirmatory_mf_swa"


def get_sweep():
  base = get_config()
  base.eval.tasks = ",".join(EVAL_TASKS)
  return Sweep(base=base, grid=points())
