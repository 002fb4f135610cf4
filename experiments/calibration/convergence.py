"""How far the findings' curves are from convergence at toy scale: the findings' own setting
(experiments/toy_study/config.py: toy-xs, synthetic T=64, 8 pairs, batch 64) with full
attention, trained 4x as long as the study (120 N = 23.6M tokens instead of 30 N), seed 0,
evaluated along training as the study's runs are. Its far accuracy over tokens says whether
30 N ends on a plateau or on a rise. The study's full-attention baseline is in its store.

Rule, written before the run: the study's budget reaches convergence if this run's mean far
accuracy over its last quarter of training (90-120 N) exceeds the mean over the study's three
F seeds at their last evaluation (30 N) by less than MARGIN (0.05, about the standard error
of one 64-example accuracy near 0.4); otherwise "not converged at 30 N". One seed: a
difference within two margins is reported as inconclusive rather than as either.

    hybrid-jax sweep submit experiments/calibration/convergence.py --root runs/calibration
"""

from experiments.toy_study import config as T
from hybrid_jax.launch.grid import Sweep

BUDGET = 4 * T.BUDGET
MARGIN = 0.05


def get_sweep():
  return Sweep(base=T.get_config(), grid=[T.point(pattern="F", budget=BUDGET, seed=0)])
