"""Teacher-forced answers: exact-match accuracy and answer-token loss, under a ``Plan``."""

import numpy as np
from scipy.special import log_softmax

from hybrid_jax.analysis.mechanism import forward as F


def answer_metrics(model, examples, plan=F.Plan(), batch: int = 4) -> dict:
  """dict(acc: share of examples whose every answer token is the argmax one row earlier,
  answer_loss: mean nats per answer token, correct: per example)."""
  correct, losses = np.zeros(len(examples), bool), []
  groups = {}
  for i, ex in enumerate(examples):
    groups.setdefault(len(ex.answer_positions), []).append(i)
  for idx in groups.values():
    for lo in range(0, len(idx), batch):
      part = idx[lo:lo + batch]
      tokens = np.stack([examples[i].tokens for i in part])
      rows = np.stack([examples[i].answer_positions - 1 for i in part])
      logits = np.asarray(F.forward(model, tokens, rows, plan, want=())["logits"], np.float64)
      targets = np.take_along_axis(tokens, rows + 1, axis=1)
      logp = np.take_along_axis(log_softmax(logits, -1), targets[..., None], -1)[..., 0]
      losses.extend((-logp).ravel())
      correct[part] = (logits.argmax(-1) == targets).all(-1)
  return dict(acc=float(correct.mean()) if len(examples) else float("nan"),
              answer_loss=float(np.mean(losses)) if losses else float("nan"),
              correct=correct.tolist())
