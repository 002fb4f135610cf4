"""What the loop does around its steps, as hooks with ``every=`` (levanter's shape): the
loop only dispatches steps and, once step N+1 is queued, hands step N to each hook that is
due. Reading a step's metrics waits for that step only; the device already has the next.

  MetricsHook      every train.log_every: metrics.jsonl, TensorBoard, status, progress bar,
                   loss watch, and the caller's ``Hook.log``
  CheckpointHook   the orbax policy (checkpoint.every, log-spaced steps, the last step):
                   async save, then the caller's ``Hook.checkpoint``
  EvalHook         every eval.every: the caller's ``Hook.eval``, numbers to TensorBoard

A hook is due at its ``every``-th steps and at the last step (``due``)."""

import dataclasses
import time

import jax

from hybrid_jax.train.failures import LossWatch


@dataclasses.dataclass
class StepView:
  """Step ``step``'s outcome, handed to the hooks once the next step is dispatched."""
  step: int
  state: dict                      # the train state after ``step`` (on device)
  metrics: dict                    # its metrics, on device


class LoopHook:
  every: int | None = None

  def __init__(self, total: int):
    self.total = total

  def due(self, step: int) -> bool:
    return step == self.total or bool(self.every) and step % self.every == 0

  def __call__(self, view: StepView):
    raise NotImplementedError


class MetricsHook(LoopHook):
  """One record per ``every`` steps: what the run has done, and how fast."""

  def __init__(self, total, *, every, run, writer, bar, hooks, schedule, tokens_per_step, lr,
               start, batches):
    super().__init__(total)
    self.every, self.run, self.writer, self.bar, self.hooks = every, run, writer, bar, hooks
    self.schedule, self.tokens_per_step = schedule, tokens_per_step
    self.watch = LossWatch(lr)
    self.batches = batches
    self.t_last, self.step_last, self.wait_last = time.perf_counter(), start, 0.0

  def __call__(self, view: StepView):
    step = view.step             # reading the metrics waits for this step, not the queued one
    metrics = {k: float(v) for k, v in jax.device_get(view.metrics).items()}
    self.watch.check(step, metrics["loss"])
    now = time.perf_counter()
    tps = (step - self.step_last) * self.tokens_per_step / max(now - self.t_last, 1e-9)
    wait = self.batches.wait_s
    record = dict(step=step, tokens=step * self.tokens_per_step, loss=metrics["loss"],
                  lr=float(self.schedule(step - 1)), grad_norm=metrics["grad_norm"],
                  tokens_per_s=tps, answer_loss=metrics["answer_loss"],
                  answer_acc=metrics["answer_acc"],
                  # the share of the interval the loop waited for its input
                  input_wait=(wait - self.wait_last) / max(now - self.t_last, 1e-9))
    self.t_last, self.step_last, self.wait_last = now, step, wait
    self.run.append_metrics(record)
    for k, v in record.items():
      if k != "step":
        self.writer.add_scalar(f"train/{k}", v, step)
    self.run.write_status("running", step, self.total)        # sweep status shows the step
    self.bar.logged(record)
    for hook in self.hooks:
      hook.log(step, record)


class CheckpointHook(LoopHook):
  """Saves through ``Checkpointer`` (async: the loop waits only for the device-to-host copy)
  at the steps its orbax policy picks."""

  def __init__(self, total, ckpt, hooks):
    super().__init__(total)
    self.ckpt, self.hooks = ckpt, hooks

  def due(self, step: int) -> bool:
    return step == self.total or self.ckpt.should_save(step)

  def __call__(self, view: StepView, force: bool = False):
    if self.ckpt.save(view.step, view.state, force=force or view.step == self.total):
      for hook in self.hooks:
        hook.checkpoint(view.step)


class EvalHook(LoopHook):
  """The caller's evaluation (``Hook.eval``) every ``eval.every`` steps and at the last."""

  def __init__(self, total, *, every, hooks, writer):
    super().__init__(total)
    self.every, self.hooks, self.writer = every, hooks, writer

  def due(self, step: int) -> bool:
    return bool(self.every) and super().due(step)

  def __call__(self, view: StepView):
    for hook in self.hooks:
      for k, v in (hook.eval(view.step, view.state["params"]) or {}).items():
        if k not in ("step", "settings_id") and isinstance(v, (int, float)):
          self.writer.add_scalar(f"eval/{k}", v, view.step)
