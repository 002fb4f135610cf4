"""A training run with the standard hooks, what every run made by a command is: the train
command, a sweep's worker, the benches' runs. Besides ``hybrid_jax.train.loop.train`` it
evaluates during training (``eval.every``) and writes the training curves at the end; it
sits above ``train/``, ``eval/`` and ``plot/`` so that the loop imports neither.
"""

import sys

from hybrid_jax.core.hooks import Hook

# The trainer, evaluation, figures and resolve import JAX or matplotlib (seconds, measured:
# `train --help` took 0.6 s with them deferred, over 10 s without), so the functions that
# need them import them: help and flag errors stay instant.


class CurvesAtEnd(Hook):
  """Writes curves.png (loss and answer accuracy against tokens) when the run is done."""

  def end(self, run):
    from hybrid_jax.plot.curves import write_training_curves   # lazy: matplotlib, see above
    write_training_curves(run)


def standard_hooks(cfg) -> tuple[Hook, ...]:
  """What a train command does besides training: evaluation at ``eval.every`` (when set)
  and the end-of-run curves."""
  from hybrid_jax.eval.evaluate import TrainingEval   # lazy: JAX, see above
  return ((TrainingEval(),) if cfg.eval.every else ()) + (CurvesAtEnd(),)


def train(cfg, workdir, **kwargs) -> dict:
  """``hybrid_jax.train.loop.train`` with the standard hooks: the run a command makes."""
  from hybrid_jax.resolve import ensure_resolved   # lazy: JAX, see above
  from hybrid_jax.train import distributed, loop, precompile
  cfg = ensure_resolved(cfg)
  distributed.initialize()      # before the note below asks JAX for its backend (multi-process jobs)
  if kwargs.get("progress") is not False and distributed.is_primary():
    # the first step can take a while: say why
    print(f"hybrid-jax: {precompile.first_step_note(cfg)}", file=sys.stderr, flush=True)
  if precompile.wanted():       # XLA:CPU runs a step it loaded faster than one it compiled
    precompile.in_child(cfg)
  return loop.train(cfg, workdir, hooks=standard_hooks(cfg), **kwargs)
