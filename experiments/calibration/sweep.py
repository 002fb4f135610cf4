"""The calibration runs behind experiments/README.md: where does long-range retrieval emerge
in the full-attention baseline on this 2-core CPU? Every run is full attention (``F``),
toy-xs unless stated, lr 3e-3 cosine, one seed; each point is one setting that was tried.

    hybrid-jax sweep submit experiments/calibration/sweep.py --root runs/calibration
    python -m experiments.calibration.by_distance runs/calibration/<run>
"""

from hybrid_jax.configs.default import get_config
from hybrid_jax.launch.grid import Sweep, axis, product


def point(**overrides):
  return product(*(axis(k.replace("__", "."), [v]) for k, v in overrides.items()))


def get_sweep():
  base = get_config()
  base.model.pattern = "F"
  base.train.tokens = None
  base.checkpoint.every = 500
  base.train.log_every = 50
  grid = (
      # The training mix (MQAR pairs " abc:42" in prose, byte tokens), T = 256.
      point(data__name="mix", data__seq_len=256, data__n_pairs=9, train__batch_size=16,
            train__steps=1200) +
      point(data__name="mix", data__seq_len=256, data__n_pairs=9, data__long_fraction=1.0,
            train__batch_size=16, train__steps=3000) +
      # The synthetic source (single-token keys and values in Zipf-word filler).
      point(data__name="synthetic", data__seq_len=256, data__n_pairs=16, train__batch_size=16,
            train__steps=1500) +
      point(data__name="synthetic", data__seq_len=64, data__n_pairs=8, train__batch_size=32,
            train__steps=2000) +
      point(data__name="synthetic", data__seq_len=128, data__n_pairs=16, train__batch_size=16,
            train__steps=2000) +
      point(data__name="synthetic", data__seq_len=128, data__n_pairs=16, data__min_distance=32,
            train__batch_size=16, train__steps=2500) +
      point(model__size="toy-s", data__name="synthetic", data__seq_len=128, data__n_pairs=16,
            train__batch_size=16, train__steps=3000) +
      # The setting that emerged: T = 128, batch 32 (4K tokens a step), 5,000 steps.
      point(data__name="synthetic", data__seq_len=128, data__n_pairs=16, train__batch_size=32,
            train__steps=5000))
  return Sweep(base=base, grid=grid)
