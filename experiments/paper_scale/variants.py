"""The paper's extra variants, to submit on accelerators (base: ``hybrid_jax.configs.paper``):

- the 1:3 (full:efficient) SWA-128 hybrid ``SSSF`` (full attention every fourth layer), at
  the sizes whose depth is a multiple of 4 (S2, S3);
- the head-wise hybrid ``H`` (half of every layer's heads use a 128 window), S1-S5;
- the design result: S5 SWA-128 with RoPE everywhere vs NoPE on the full-attention layers
  only, ~100B tokens (210N of S5's 477M).
"""

from hybrid_jax.configs import paper
from hybrid_jax.launch.grid import Sweep, axis, product


def get_sweep():
  one_three = product(axis("model.size", ["S2", "S3"]), axis("model.pattern", ["SSSF"]),
                      axis("model.window", [128]), axis("train.tokens_per_param", paper.BUDGETS))
  headwise = product(axis("model.size", ["S1", "S2", "S3", "S4", "S5"]), axis("model.pattern", ["H"]),
                     axis("model.window", [128]), axis("train.tokens_per_param", [100.0, 500.0]))
  nope = product(axis("model.size", ["S5"]), axis("model.pattern", ["SF"]), axis("model.window", [128]),
                 axis("train.tokens_per_param", [210.0]), axis("model.pos_full", ["rope", "nope"]))
  return Sweep(base=paper.get_config(), slurm=dict(paper.SLURM), grid=one_three + headwise + nope)
