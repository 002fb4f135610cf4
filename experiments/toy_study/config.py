"""The toy setting of the paper reproductions in experiments/ (chosen by the calibration in
experiments/README.md): toy-xs on the synthetic source at T = 64 with 8 key/value pairs
per row (dense retrieval supervision, query-to-evidence distance log-uniform on [1, 64]),
batch 64 (4K tokens a step), lr 3e-3 cosine, 30 N tokens (~6M for toy-xs, ~5 minutes on
one core).

Long-context ability is ``kv_recall`` accuracy (a fact, then a query for it) at a distance
beyond the windows: at the training length 64 and at 128 (2x), evaluated every 100 steps
on the same 32 examples per cell for every run, so emergence curves compare like with like.

``point()`` builds a grid point with every key the studies sweep, in one order, so the
same model lands in the same run directory whichever finding's sweep asks for it: the
findings share one root and train each run once.
"""

from hybrid_jax.configs.base import base_config

ROOT = "runs/toy_study"          # the shared root of every finding's sweep
SEEDS = (0, 1, 2)
WINDOWS = {"small": 4, "medium": 16, "large": 32}   # of T = 64: 1/16, 1/4, 1/2
BUDGET = 30.0                    # tokens per non-embedding parameter of the 3-seed runs
EVAL_LENGTHS = (64, 128)
EVAL_DEPTHS = (0.0, 0.25, 0.5)


def get_config():
  c = base_config()
  c.model.size = "toy-xs"
  c.model.pattern = "F"
  c.data.name = "synthetic"
  c.data.seq_len = 64
  c.data.n_pairs = 8
  c.train.batch_size = 64
  c.train.tokens = None
  c.train.tokens_per_param = BUDGET
  c.train.warmup_steps = 20       # the smallest scaling runs are ~20-90 steps long
  c.train.log_every = 50
  c.checkpoint.every = 100
  c.checkpoint.log_per_octave = 4
  c.eval.every = 100
  c.eval.tasks = "kv_recall"
  c.eval.lengths = EVAL_LENGTHS
  c.eval.depths = EVAL_DEPTHS
  c.eval.examples = 32
  c.eval.short_rows = 64
  c.eval.longppl_rows = 0
  return c


def point(*, pattern="F", window=None, pos_full="rope", size="toy-xs", budget=BUDGET, seed=0):
  """One grid point; every key present, in one order, so run names agree across sweeps.
  ``window`` is a size name of WINDOWS or None (no SWA layer: the value is unused)."""
  w = WINDOWS[window] if window else WINDOWS["medium"]
  return {"model.size": size, "model.pattern": pattern, "model.window": w,
          "model.pos_full": pos_full, "train.tokens_per_param": float(budget),
          "train.seed": seed}
