"""Long-context exact-match accuracy on the synthetic tasks of ``hybrid_jax.data.tasks``.

An example is correct when every answer token is the argmax of the logits one position
earlier (teacher forcing; for exact match this equals greedy generation). Examples of cell
(task, length, depth) are ``indices 0..examples-1`` at ``eval.seed``: the same for every run
and checkpoint, so curves compare like with like.
"""

import numpy as np

from hybrid_jax import data
from hybrid_jax.eval import settings as eval_settings
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
          self.cells.append(((name, length, depth), inputs, targets, mask))

  def __call__(self, scorer, params) -> dict:
    """Accuracy per cell, per (task, length), per task, per length (``retrieval_acc_at/L``),
    and ``retrieval_acc``, the mean over every cell (each cell weighs the same)."""
    if not self.cells:
      return {}
    out, per_length, per_task = {}, {}, {}
    for (name, length, depth), inputs, targets, mask in self.cells:
      _, hit = scorer.score(params, inputs, targets, self.settings.rows(length))
      correct_N = np.all(hit | ~mask, axis=1) & mask.any(axis=1)
      acc = float(correct_N.mean())
      out[metric_key(name, length, depth)] = acc
      per_length.setdefault((name, length), []).append(acc)
      per_task.setdefault(name, []).append(acc)
    for (name, length), accs in per_length.items():
      out[metric_key(name, length)] = float(np.mean(accs))
    for name, accs in per_task.items():
      out[metric_key(name)] = float(np.mean(accs))
    for length in self.settings.lengths:    # every task at one context length
      out[f"retrieval_acc_at/{length}"] = float(np.mean(
          [acc for (name, n), accs in per_length.items() if n == length for acc in accs]))
    out["retrieval_acc"] = float(np.mean([a for accs in per_task.values() for a in accs]))
    return out
