"""Held-out text for the short-context loss and LongPPL, from the run's own data source.

A data source that offers ``heldout_batch(index, rows=...)`` (a corpus validation split)
is used through it. Otherwise held-out rows are the source's batches at seed ``eval.seed``
and steps from ``HELDOUT_STEP0`` on, which no training run reaches: every run evaluated
with the same settings sees the same text, and none of it was trained on (runs whose
``data.seed`` equals ``eval.seed`` still train on steps < HELDOUT_STEP0 only).
"""

import copy

import numpy as np

from hybrid_jax.data import make_source

HELDOUT_STEP0 = 2 ** 30
SHORT_STREAM, LONG_STREAM = 0, 2 ** 20     # disjoint step ranges for the two uses


def heldout_rows(cfg, *, length: int, rows: int, seed: int, stream: int):
  """(inputs [rows, length], targets [rows, length]) int32 of held-out text."""
  c = copy.deepcopy(cfg)
  c.data.seq_len, c.data.seed, c.train.batch_size = length, seed, rows
  source = make_source(c)
  if hasattr(source, "heldout_batch"):
    b = source.heldout_batch(stream, rows=range(rows))
  else:
    b = source.batch(HELDOUT_STEP0 + stream, rows=range(rows))
  return np.asarray(b["inputs"], np.int32), np.asarray(b["targets"], np.int32)


class ShortLossEval:
  """Mean next-token loss (nats) and perplexity on held-out text at ``eval.short_length``."""

  def __init__(self, cfg, settings):
    self.settings = settings
    self.data = None
    if settings.short_rows:
      self.data = heldout_rows(cfg, length=settings.short_length, rows=settings.short_rows,
                               seed=settings.seed, stream=SHORT_STREAM)

  def __call__(self, scorer, params) -> dict:
    if self.data is None:
      return {}
    inputs, targets = self.data
    nll, _ = scorer.score(params, inputs, targets, self.settings.rows(self.settings.short_length))
    loss = float(nll.mean())
    return dict(short_loss=loss, short_ppl=float(np.exp(loss)))
