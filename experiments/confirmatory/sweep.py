"""Every confirmatory run: the arms of ``arms.py``, 7 fresh seeds each, toy-xs at 30 N,
evaluated on kv_recall and kv_recall_start (the fact at offset 0):

    hybrid-jax sweep submit experiments/confirmatory/sweep.py --root runs/confirmatory --parallel 2

Seed by seed, so a partial sweep already holds whole seeds of every arm."""

from experiments.confirmatory.arms import ARMS
from experiments.confirmatory.protocol import EVAL_TASKS, SEEDS
from experiments.toy_study.config import get_config
from hybrid_jax.launch.grid import Sweep

ROOT = "runs/confirmatory"
STORE = "experiments/data/confirmatory"


def get_sweep():
  base = get_config()
  base.eval.tasks = ",".join(EVAL_TASKS)
  grid = [p for s in SEEDS for arm in ARMS for p in arm.points() if p["train.seed"] == s]
  return Sweep(base=base, grid=grid)
