"""What the loop lets others do at its steps, without it importing them: the train command
passes training-time evaluation and the end-of-run figure as hooks, so the loop depends on
neither ``eval/`` nor ``plot/``, and evaluation's hook depends on nothing of ``train/``.
Every method is optional (this base does nothing)."""


class Hook:

  def check(self, cfg):
    """Before anything is computed or written: raise a one-line ``UserError`` on settings
    the hook cannot honour (``cfg`` is resolved)."""

  def start(self, run, graphdef, rest, step: int, params):
    """After the newest intact checkpoint was restored (``step``, 0 for a new run), before
    the first step; raising here marks the run failed and stops it."""

  def log(self, step: int, record: dict):
    """At every logged step, with the record appended to metrics.jsonl."""

  def eval(self, step: int, params) -> dict | None:
    """At every eval step (``eval.every`` and the last step; also the restored step, which
    a crash may have left unevaluated): a record whose numbers go to TensorBoard, or None."""

  def checkpoint(self, step: int):
    """After checkpoint ``step`` was written."""

  def end(self, run):
    """After the run finished (process 0 only)."""


def is_eval_step(cfg, step: int) -> bool:
  """``eval.every``-th steps and the last one; never step 0 (nothing trained yet)."""
  every = cfg.eval.every
  return bool(every) and step > 0 and (step % every == 0 or step == cfg.derived.steps)
