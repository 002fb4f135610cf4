"""The paper's scaling grid, to submit on accelerators: S1-S5 x seven parameter-matched
architectures x token budgets 100N..1000N, 16K context, 1:1 long/short mix.

Architectures: full attention; SWA hybrids (1:1, full attention at the odd layers) with
windows 128 / 512 / 2048; Lightning, Mamba-2 and Gated DeltaNet hybrids (1:1). The 1:3,
head-wise and NoPE variants are in ``experiments/paper_scale/variants.py``.

    hybrid-jax sweep submit experiments/paper_scale/scaling.py --root runs/paper --backend slurm \\
        --slurm slurm_partition=gpu --config.data.corpus=data/c4
"""

from hybrid_jax.configs import paper
from hybrid_jax.launch.grid import Sweep, axis, product

SIZES = ["S1", "S2", "S3", "S4", "S5"]
ARCHITECTURES = (
    axis("model.pattern", ["F"]) +
    product(axis("model.pattern", ["SF"]), axis("model.window", [128, 512, 2048])) +
    axis("model.pattern", ["LF", "MF", "GF"]))


def get_sweep():
  return Sweep(base=paper.get_config(), slurm=dict(paper.SLURM), grid=product(
      axis("model.size", SIZES), ARCHITECTURES, axis("train.tokens_per_param", paper.BUDGETS)))
