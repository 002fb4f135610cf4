"""What the loop does around its steps, as hooks with ``every=`` (levanter's shape): the
loop only dispatches steps and, once step N+1 is queued, hands step N to each hook that is
due. Reading a step's metrics waits for that step only; the device already has the next.

  MetricsHook      every train.log_every: reads the step's metrics into one record (once)
                   and hands it to the record hooks that are due:
    LossWatchHook    a non-finite or diverging loss stops the run, in one line
    MetricsFileHook  metrics.jsonl
    TensorBoardHook  train/* scalars
    StatusHook       status.json's step (what ``sweep status`` shows)
    ProgressHook     the progress bar's postfix (the bar itself ticks every step)
    CallerLogHook    the caller's ``Hook.log``
  CheckpointHook   the orbax policy (checkpoint.every, log-spaced steps, the last step):
                   async save, then the caller's ``Hook.checkpoint``
  EvalHook         every eval.every: the caller's ``Hook.eval``, numbers to TensorBoard
  PreemptionHook   on SIGTERM/SIGINT (or another process's vote): save, wait for the save
                   in flight, mark the run preempted, stop

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


class RecordHook(LoopHook):
  """A hook on a logged step's record (``MetricsHook`` reads it once for all of them)."""

  def __init__(self, total, every):
    super().__init__(total)
    self.every = every

  def __call__(self, step: int, record: dict):
    raise NotImplementedError


class LossWatchHook(RecordHook):
  def __init__(self, total, every, lr):
    super().__init__(total, every)
    self.watch = LossWatch(lr)

  def __call__(self, step, record):
    self.watch.check(step, record["loss"])


class MetricsFileHook(RecordHook):
  def __init__(self, total, every, run):
    super().__init__(total, every)
    self.run = run

  def __call__(self, step, record):
    self.run.append_metrics(record)


class TensorBoardHook(RecordHook):
  def __init__(self, total, every, writer):
    super().__init__(total, every)
    self.writer = writer

  def __call__(self, step, record):
    for k, v in record.items():
      if k != "step":
        self.writer.add_scalar(f"train/{k}", v, step)


class StatusHook(RecordHook):
  def __init__(self, total, every, run):
    super().__init__(total, every)
    self.run = run

  def __call__(self, step, record):
    self.run.write_status("running", step, self.total)      # sweep status shows the step


class ProgressHook(RecordHook):
  def __init__(self, total, every, bar):
    super().__init__(total, every)
    self.bar = bar

  def __call__(self, step, record):
    self.bar.logged(record)


class CallerLogHook(RecordHook):
  def __init__(self, total, every, hooks):
    super().__init__(total, every)
    self.hooks = hooks

  def __call__(self, step, record):
    for hook in self.hooks:
      hook.log(step, record)


def record_hooks(total, every, *, run, writer, bar, hooks, lr) -> list[RecordHook]:
  """The loop's standard record hooks, each every ``every`` steps (the loss watch first:
  a diverged run writes no record of its bad step)."""
  return [LossWatchHook(total, every, lr), MetricsFileHook(total, every, run),
          TensorBoardHook(total, every, writer), StatusHook(total, every, run),
          ProgressHook(total, every, bar), CallerLogHook(total, every, hooks)]


class MetricsHook(LoopHook):
  """One record per ``every`` steps: what the run has done, and how fast; read once and
  handed to each record hook that is due."""

  def __init__(self, total, *, every, sinks, schedule, tokens_per_step, start, batches):
    super().__init__(total)
    self.every, self.sinks = every, sinks
    self.schedule, self.tokens_per_step = schedule, tokens_per_step
    self.batches = batches
    self.t_last, self.step_last, self.wait_last = time.perf_counter(), start, 0.0

  def __call__(self, view: StepView):
    step = view.step             # reading the metrics waits for this step, not the queued one
    metrics = {k: float(v) for k, v in jax.device_get(view.metrics).items()}
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
    for sink in self.sinks:
      if sink.due(step):
        sink(step, record)


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


class Preempted(Exception):
  """Training stopped on SIGTERM/SIGINT after saving a checkpoint."""


class PreemptionHook(LoopHook):
  """A stop asked for by a signal (or, across processes, by another process's vote): the
  step is saved, the save in flight waited for, the run marked preempted; then it stops."""

  def __init__(self, total, *, run, save, ckpt):
    super().__init__(total)
    self.run, self.save, self.ckpt = run, save, ckpt

  def __call__(self, view: StepView, signum: int | None = None):
    self.save(view, force=True)
    self.ckpt.wait()                        # SIGTERM: the save in flight is on disk first
    why = (f"stopped by signal {signum}" if signum is not None
           else "stopped by a signal to another process of the job")
    self.run.write_status("preempted", view.step, self.total, why)
    raise Preempted(f"preempted at step {view.step}/{self.total}; rerun the same command to resume")
