"""Toy CPU sweep: full attention vs SWA hybrids with three windows, two seeds.

8 runs of 200 steps of the toy default (~1 minute each on one core): submit with
``hybrid-jax sweep submit sweeps/toy_windows.py --root runs/toy_windows``.
"""

from hybrid_jax.configs.default import get_config
from hybrid_jax.launch.grid import Sweep, axis, product


def get_sweep():
  base = get_config()
  base.train.tokens = 200 * base.train.batch_size * base.data.seq_len
  # Evaluate during training (a light setting, so a CPU sweep stays quick); the emergence
  # curves then come straight from the runs: hybrid-jax plot emergence ROOT. The runs train
  # on the synthetic source, so they are scored on kv_recall, the retrieval they can learn
  # (text tasks would sit at 0 for every run: these models never saw text).
  base.eval.every = 50
  base.eval.tasks = "kv_recall"
  base.eval.lengths = (256, 512)
  base.eval.depths = (0.0, 0.5)
  base.eval.examples = 8
  base.eval.longppl_rows = 4
  base.eval.longppl_length = 512
  full = product(axis("model.pattern", ["F"]), axis("train.seed", [0, 1]))
  swa = product(axis("model.pattern", ["SF"]), axis("model.window", [8, 32, 128]),
                axis("train.seed", [0, 1]))
  return Sweep(base=base, grid=full + swa)
