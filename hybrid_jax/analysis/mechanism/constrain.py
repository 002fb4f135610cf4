"""Receptive-field constraint at inference: cap the full-attention layers (F, the full heads
of H) at W, or separately the efficient layers (SWA heads at min(w, W), recurrent mixers on
their last W tokens), and compare long-context NIAH metrics and the short-context loss. One
operator for every layer kind: an output sees only the last W tokens.

Short-context loss: held-out text from the run's own data source at ``eval.short_length``
(``hybrid_jax.eval.heldout.heldout_rows``, the rows ``hybrid-jax eval`` scores).
"""

import numpy as np
from scipy.special import log_softmax

from hybrid_jax.analysis.mechanism import forward as F
from hybrid_jax.analysis.mechanism.answers import answer_metrics
from hybrid_jax.eval.heldout import SHORT_STREAM, heldout_rows, split_losses


def plans(window: int) -> dict[str, F.Plan]:
  return {"none": F.Plan(),
          "full_constrained": F.Plan(cap_full=window),
          "efficient_constrained": F.Plan(cap_local=window, cap_recurrent=window)}


def short_loss(model, inputs_NxT, targets_NxT, answers_NxT, plan: F.Plan, batch: int = 8) -> dict:
  """``split_losses`` of the held-out rows: filler-only ``short_loss``, ``short_answer_loss``
  and the all-token ``short_loss_all``."""
  t = inputs_NxT.shape[1]
  nll = []
  for lo in range(0, len(inputs_NxT), batch):
    x, y = inputs_NxT[lo:lo + batch], targets_NxT[lo:lo + batch]
    rows = np.broadcast_to(np.arange(t), x.shape)
    logits = np.asarray(F.forward(model, x, rows, plan, want=())["logits"], np.float64)
    nll.append(-np.take_along_axis(log_softmax(logits, -1), y[..., None], -1)[..., 0])
  return split_losses(np.concatenate(nll), answers_NxT)


def heldout(cfg, rows: int, length: int | None = None):
  length = length or cfg.eval.short_length or cfg.data.seq_len
  return heldout_rows(cfg, length=length, rows=rows, seed=cfg.eval.seed, stream=SHORT_STREAM,
                      answers=True)


def constrain(model, examples, window: int, short=None) -> dict:
  """{setting: dict(acc, answer_loss, short_loss, ...)} for none / full- / efficient-constrained;
  ``short`` = (inputs, targets, answer mask) of held-out text, or None to skip the short loss."""
  out = {}
  for name, plan in plans(window).items():
    m = answer_metrics(model, examples, plan)
    rec = dict(acc=m["acc"], answer_loss=m["answer_loss"])
    if short is not None:
      rec.update(short_loss(model, *short, plan))
    out[name] = rec
  return out
