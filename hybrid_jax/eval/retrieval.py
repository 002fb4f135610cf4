"""Long-context exact-match accuracy on the synthetic tasks of ``hybrid_jax.data.tasks``.

An example is correct when every answer token is the argmax of the logits one position
earlier (teacher forcing; for exact match this equals greedy generation). Examples of cell
(task, length, depth) are ``indices 0..examples-1`` at ``eval.seed``: the same for every run
and checkpoint, so curves compare like with like.
"""

import numpy as np

from hybrid_jax import data
from hybrid_jax.core import eval_settings
from hybrid_jax.eval.scoring import shift_tokens


def metric_key(task: str, length: int | None = None, depth: float | None = None) -> str:
  key = f"retrieval_acc/{task}"
  if length is not None:
    key += f"/{length}"
  if depth is not None:
    key += f"/d{depth:.2f}"
  return key


def task_inputs(cfg):
  """(tokenizer, corpus) the run's tasks are built with: its own tokenizer and, when it
  trains on a corpus, that corpus's validation split (``hybrid_jax.data.task_inputs``)."""
  return data.task_inputs(cfg.data)


def evidence_distance(answer_NxT, evidence_NxT):
  """Tokens from an example's last evidence token to its first answer token (0 when either
  is missing): the distance a retrieval spans, apart from where in the context it sits."""
  t = answer_NxT.shape[1]
  pos_T = np.arange(t)
  first_answer = np.where(answer_NxT, pos_T, t).min(axis=1)
  last_evidence = np.where(evidence_NxT & (pos_T < first_answer[:, None]), pos_T, -1).max(axis=1)
  ok = (first_answer < t) & (last_evidence >= 0)
  return np.where(ok, first_answer - last_evidence, 0)


def distance_bin(d: int) -> tuple[int, int]:
  """Powers-of-two bins [lo, hi) of distances (1-2, 2-4, 4-8, ...): accuracy per distance
  at every depth pooled, so position in the context and distance are told apart."""
  lo = 1 << (int(d).bit_length() - 1)
  return lo, 2 * lo


class RetrievalEval:
  """The task batches are built once (they do not depend on the model)."""

  def __init__(self, cfg, settings):
    self.settings = settings
    self.cells = []
    if not settings.tasks:
      return
    tasks = eval_settings.task_module()
    tokenizer, corpus = task_inputs(cfg)
    for name in settings.tasks:
      for length in settings.lengths:
        for depth in settings.depths:
          b = tasks.make_batch(name, length=length, depth=depth, seed=settings.seed,
                               indices=range(settings.examples), tokenizer=tokenizer, corpus=corpus)
          inputs, targets, mask = shift_tokens(np.asarray(b["tokens"]), np.asarray(b["answer_mask"]))
          distance_N = evidence_distance(np.asarray(b["answer_mask"]), np.asarray(b["evidence_mask"]))
          self.cells.append(((name, length, depth), inputs, targets, mask, distance_N))

  def __call__(self, scorer, params) -> dict:
    """Accuracy per cell, per (task, length), per task, per length (``retrieval_acc_at/L``),
    ``retrieval_acc``, the mean over every cell (each cell weighs the same), and per
    evidence-to-answer distance bin over a length's depths (``retrieval_acc_by_distance/
    TASK/L/LO-HI``, with its example count ``retrieval_n_by_distance/...``)."""
    if not self.cells:
      return {}
    out, per_length, per_task, by_distance = {}, {}, {}, {}
    for (name, length, depth), inputs, targets, mask, distance_N in self.cells:
      _, hit = scorer.score(params, inputs, targets, self.settings.rows(length))
      correct_N = np.all(hit | ~mask, axis=1) & mask.any(axis=1)
      acc = float(correct_N.mean())
      out[metric_key(name, length, depth)] = acc
      per_length.setdefault((name, length), []).append(acc)
      per_task.setdefault(name, []).append(acc)
      for d, ok in zip(distance_N, correct_N):
        if d > 0:
          by_distance.setdefault((name, length, distance_bin(d)), []).append(bool(ok))
    for (name, length, (lo, hi)), oks in sorted(by_distance.items()):
      out[f"retrieval_acc_by_distance/{name}/{length}/{lo}-{hi}"] = float(np.mean(oks))
      out[f"retrieval_n_by_distance/{name}/{length}/{lo}-{hi}"] = len(oks)
    for (name, length), accs in per_length.items():
      out[metric_key(name, length)] = float(np.mean(accs))
    for name, accs in per_task.items():
      out[metric_key(name)] = float(np.mean(accs))
    for length in self.settings.lengths:    # every task at one context length
      out[f"retrieval_acc_at/{length}"] = float(np.mean(
          [acc for (name, n), accs in per_length.items() if n == length for acc in accs]))
    out["retrieval_acc"] = float(np.mean([a for accs in per_task.values() for a in accs]))
    return out
