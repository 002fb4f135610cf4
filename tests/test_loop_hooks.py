"""The loop's hooks: a logged step's metrics are read once into a record that every record
hook due at that step receives, each at its own ``every``; the loop's standard record hooks
keep their order (the loss watch first, so a diverged step writes no record)."""

import jax.numpy as jnp
import pytest

from hybrid_jax.train import loop_hooks as H
from hybrid_jax.train.failures import LossWatch


class _Batches:
  wait_s = 0.0


class _Seen(H.RecordHook):
  def __init__(self, total, every, log):
    super().__init__(total, every)
    self.log = log

  def __call__(self, step, record):
    self.log.append((self.every, step, record["loss"]))


def _view(step, loss=1.0):
  return H.StepView(step, {}, dict(loss=jnp.float32(loss), grad_norm=jnp.float32(1.0),
                                   answer_loss=jnp.float32(0.0), answer_acc=jnp.float32(0.0)))


def test_each_record_hook_gets_the_one_record_at_its_own_every_and_at_the_last_step():
  log = []
  hook = H.MetricsHook(10, every=2, sinks=[_Seen(10, 2, log), _Seen(10, 4, log)],
                       schedule=lambda s: 0.1, tokens_per_step=8, start=0, batches=_Batches())
  for step in range(2, 11, 2):
    hook(_view(step, loss=step))
  assert [(e, s) for e, s, _ in log] == [(2, 2), (2, 4), (4, 4), (2, 6), (2, 8), (4, 8), (2, 10), (4, 10)]
  assert all(loss == step for _, step, loss in log)


def test_the_standard_record_hooks_watch_the_loss_before_anything_is_written():
  hooks = H.record_hooks(10, 2, run=None, writer=None, bar=None, hooks=(), lr=1e-3)
  assert [type(h) for h in hooks] == [H.LossWatchHook, H.MetricsFileHook, H.TensorBoardHook,
                                      H.StatusHook, H.ProgressHook, H.CallerLogHook]
  assert all(h.every == 2 for h in hooks)
  with pytest.raises(Exception):                     # nothing else would be reached
    hooks[0](2, dict(loss=float("nan")))
  assert isinstance(hooks[0].watch, LossWatch)
