"""Held-out text for the short-context loss and LongPPL, from the run's own data source.

A data source that offers ``heldout_batch(index, rows=...)`` (a corpus validation split)
is used through it. Otherwise held-out rows are the source's batches at seed ``eval.seed``
and steps from ``HELDOUT_STEP0`` on, which no training run reaches: every run evaluated
with the same settings sees the same text, and none of it was trained on (runs whose
``data.seed`` equals ``eval.seed`` still train on steps < HELDOUT_STEP0 only).
"""

import dataclasses

import numpy as np

from hybrid_jax.data import DataConfig, source_for

HELDOUT_STEP0 = 2 ** 30
SHORT_STREAM, LONG_STREAM = 0, 2 ** 20     # disjoint step ranges for the two uses


def heldout_rows(cfg, *, length: int, rows: int, seed: int, stream: int, answers: bool = False):
  """(inputs [rows, length], targets [rows, length]) int32 of held-out text, and with
  ``answers`` the bool [rows, length] mask of positions whose target is a retrieval answer
  (all False for sources without answers)."""
  data = dataclasses.replace(DataConfig.from_config(cfg.data), seq_len=length, seed=seed)
  source = source_for(data, rows)
  if hasattr(source, "heldout_batch"):
    b = source.heldout_batch(stream, rows=range(rows))
  else:
    b = source.batch(HELDOUT_STEP0 + stream, rows=range(rows))
  out = (np.asarray(b["inputs"], np.int32), np.asarray(b["targets"], np.int32))
  if answers:
    mask = b.get("answer_mask")
    out += (np.zeros(out[1].shape, bool) if mask is None else np.asarray(mask, bool),)
  return out


def split_losses(nll_NxT, answer_NxT) -> dict:
  """The short-context loss on filler tokens only (what a retrieval answer cannot inflate or
  deflate), the answer tokens' loss apart, and the old all-token mean kept as ``_all``."""
  nll = np.asarray(nll_NxT, np.float64)
  answer = np.asarray(answer_NxT, bool)
  filler = float(nll[~answer].mean()) if (~answer).any() else float("nan")
  out = dict(short_loss=filler, short_ppl=float(np.exp(filler)), short_loss_all=float(nll.mean()))
  if answer.any():
    out["short_answer_loss"] = float(nll[answer].mean())
  return out


class ShortLossEval:
  """Next-token loss (nats) and perplexity on held-out text at ``eval.short_length``:
  ``short_loss`` over filler tokens only, ``short_answer_loss`` over retrieval answers, and
  ``short_loss_all`` over every token (the metric's definition before answers were split off)."""

  def __init__(self, cfg, settings):
    self.settings = settings
    self.data = None
    if settings.short_rows:
      self.data = heldout_rows(cfg, length=settings.short_length, rows=settings.short_rows,
                               seed=settings.seed, stream=SHORT_STREAM, answers=True)

  def __call__(self, scorer, params) -> dict:
    if self.data is None:
      return {}
    inputs, targets, answers = self.data
    nll, _ = scorer.score(params, inputs, targets, self.settings.rows(self.settings.short_length))
    return split_losses(nll, answers)
