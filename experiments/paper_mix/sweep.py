"""The paper-faithful data option (issue 18, item 5): the `mix` source as the paper trains,
long rows of documents and short rows packing shorter ones, with no injected key/value pairs
(`data.n_pairs = 0`); everything else is the toy study's setting (toy-xs, T = 64, 30 N tokens,
the same evaluations). Long rows are 64-token windows of one Python-docs document; short rows
pack 16-token windows of several (the paper's 16K / 2K split, scaled). The full-attention
baseline and the small-window SWA/full hybrid (the design finding's model), one seed each:
the question is whether retrieval emerges at all without pairs in the training data.

    hybrid-jax data build --source python-docs --out data/pydocs    # run.py does it if missing
    hybrid-jax sweep submit experiments/paper_mix/sweep.py --root runs/paper_mix
"""

from experiments.toy_study.config import get_config, point
from hybrid_jax.launch.grid import Sweep

ROOT = "runs/paper_mix"
CORPUS = "data/pydocs"
SHORT_LEN = 16
ARCHS = (("F", None), ("SF", "small"))
SEEDS = (0,)


def base_config():
  c = get_config()
  c.data.name = "mix"
  c.data.corpus = CORPUS
  c.data.n_pairs = 0
  c.data.long_fraction = 0.5
  c.data.short_len = SHORT_LEN
  return c


def get_sweep():
  return Sweep(base=base_config(), grid=[point(pattern=p, window=w, seed=s)
                                         for s in SEEDS for p, w in ARCHS])
