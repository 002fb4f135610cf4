"""The training loop: resolve, resume, train, log, checkpoint, handle preemption; what else
happens at its log, eval and checkpoint steps (evaluation, figures) comes in as hooks."""

import json
import signal
import sys

import jax

from hybrid_jax.core.eval_config import EvalConfig
from hybrid_jax.core.hooks import Hook, is_eval_step
from hybrid_jax.data.config import DataConfig
from hybrid_jax.data.pipeline import Batches, resolve_workers
from hybrid_jax.errors import UserError
from hybrid_jax.resolve import ensure_resolved
from hybrid_jax.run import RunDir
from hybrid_jax.train import distributed, sharding
from hybrid_jax.train.checkpoint import Checkpointer
from hybrid_jax.train.config import CheckpointConfig, MeshConfig, TrainConfig
from hybrid_jax.train.failures import disk_error
from hybrid_jax.train.loop_hooks import (CheckpointHook, EvalHook, MetricsHook, Preempted,
                                         PreemptionHook, StepView, record_hooks)
from hybrid_jax.train.progress import Progress
from hybrid_jax.train.resume import (compute_setup, remove_partial_saves, report_metrics_gap,
                                     report_setup_change, restore_newest_intact)
from hybrid_jax.train.state import init_state
from hybrid_jax.train.step import step_for, stop_votes

PREEMPTED_EXIT_CODE = 143


class _NoWriter:
  """The TensorBoard writer of processes other than process 0."""

  def add_scalar(self, *args, **kwargs):
    pass

  def close(self):
    pass


def _summary_writer(logdir: str, purge_step):
  """tensorboardX's SummaryWriter, imported without torch: tensorboardX imports torch, when it
  is installed, only to accept torch tensors (3.5 s of every run's start; we log floats)."""
  hide = "torch" not in sys.modules
  if hide:
    sys.modules["torch"] = None            # `import torch` raises ImportError meanwhile
  try:
    from tensorboardX import SummaryWriter
  finally:
    if hide:
      del sys.modules["torch"]
  return SummaryWriter(logdir, purge_step=purge_step)


def _close_quietly(writer):
  """Close the TensorBoard writer; on a full or read-only disk its flush fails, and its own
  atexit retry would print a traceback after the run's one-line error (metrics.jsonl holds
  the same numbers), so its writers are closed for good instead."""
  try:
    writer.close()
  except Exception:
    for w in (getattr(writer, "event_writer", None), getattr(writer, "file_writer", None)):
      if w is not None:
        w.close = lambda: None


class _StopFlag:
  def __init__(self):
    self.signum = None
    self._old = {}

  def __enter__(self):
    for s in (signal.SIGTERM, signal.SIGINT):
      self._old[s] = signal.signal(s, self._handle)
    return self

  def _handle(self, signum, frame):
    self.signum = signum

  def __exit__(self, *exc):
    for s, h in self._old.items():
      signal.signal(s, h)


def train(cfg, workdir, *, progress: bool | None = None, hooks: tuple[Hook, ...] = ()) -> dict:
  """Train (or resume) the run in ``workdir``; returns its final status. ``cfg``: requested
  or already resolved (the CLI resolves once and passes the result). ``hooks`` are called
  at log, eval and checkpoint steps (``hybrid_jax.standard_run`` passes evaluation and figures)."""
  cfg = ensure_resolved(cfg)                     # ConfigError here: nothing computed, nothing written
  distributed.initialize()                 # before JAX starts a backend (multi-host jobs)
  for hook in hooks:                       # a hook's bad settings: one line, nothing written
    hook.check(cfg)
  sharding.check_mesh(cfg)                 # MeshError (a ConfigError): before anything is written
  config = json.loads(cfg.to_json())
  run = RunDir(workdir, writer=distributed.is_primary())
  try:
    run.lock()
    try:
      run.check_or_write_config(config)
      return _train_locked(cfg, run, progress, tuple(hooks))
    except Exception as e:                 # never leave a run that looks alive (see fail_if_running)
      err = disk_error(e, run.path) or e
      run.fail_if_running(f"{err}" if isinstance(err, UserError) else f"{type(err).__name__}: {err}")
      raise
    finally:
      run.unlock()
  except Exception as e:                   # a full or read-only disk: one line, not a traceback
    if (err := disk_error(e, run.path)) is None:
      raise
    raise err from None


def _mark_failed(run, step, total, e, ckpt=None):
  """status.json says why the run stopped (unless the disk cannot take even that). A save
  that failed for a full disk leaves its partial directory: removed first, which frees the
  space the status needs, once no save is in flight (one still writing is let finish)."""
  if disk_error(e, run.path) is not None and run.writer:
    if ckpt is not None:
      try:
        ckpt.wait()
      except Exception:        # that save failed too: its directory is partial, removed below
        pass
    remove_partial_saves(run.checkpoint_dir)
  e = disk_error(e, run.path) or e
  try:
    run.write_status("failed", step, total, (f"{e}" if isinstance(e, UserError) else
                                              f"{type(e).__name__}: {e}").splitlines()[0])
  except OSError:
    pass


def run_step(cfg, mesh, graphdef, rest, tx, state_shardings):
  """A run's jitted train step, as the loop calls it (``train.precompile`` compiles the same
  program ahead, so it must be built here only)."""
  return step_for(cfg, graphdef, rest, tx, mesh=mesh, state_shardings=state_shardings)


def step_batch(cfg, mesh, local: dict) -> dict:
  """This process's rows of a step's batch -> the global batch the train step takes."""
  t = TrainConfig.from_config(cfg.train)
  return sharding.global_batch(mesh, local, t.batch_size // t.microbatches)


def _train_locked(cfg, run, progress, hooks) -> dict:
  total = cfg.derived.steps
  # The sections this loop reads, typed and frozen once (cfg itself goes on to the builders
  # and hooks, which take the whole resolved config).
  t, data = TrainConfig.from_config(cfg.train), DataConfig.from_config(cfg.data)
  ck, ev = CheckpointConfig.from_config(cfg.checkpoint), EvalConfig.from_config(cfg.eval)

  mesh = sharding.make_mesh(MeshConfig.from_config(cfg.mesh))
  graphdef, rest, state, tx, schedule = init_state(cfg, mesh)
  state_shardings = sharding.state_shardings(mesh, state)
  ckpt = Checkpointer(run.checkpoint_dir.absolute(), ck, total)
  restored, start = restore_newest_intact(   # onto this run's mesh, whatever mesh saved it
      ckpt, jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                         state, state_shardings), primary=run.writer)
  if start:
    state = restored
  report_metrics_gap(run, start, t.log_every, total)
  run.setup = compute_setup()
  report_setup_change(run.read_status(), run.setup, start)
  try:
    for hook in hooks:                     # e.g. evaluate what a crash left unevaluated
      hook.start(run, graphdef, rest, start, state["params"])
      if is_eval_step(cfg, start):
        hook.eval(start, state["params"])
  except Exception as e:                   # e.g. the reference run is gone: say so, stop cleanly
    ckpt.close()
    _mark_failed(run, start, total, e)
    raise
  if start >= total:
    run.write_status("done", start, total)
    ckpt.close()
    return run.read_status()
  run.truncate_metrics(start)
  run.write_status("running", start, total)
  if start:
    print(f"hybrid-jax: resuming {run.path} from step {start}/{total}", file=sys.stderr, flush=True)

  if run.writer:
    writer = _summary_writer(str(run.tensorboard_dir), start + 1 if start else None)
  else:
    writer = _NoWriter()
  train_step = run_step(cfg, mesh, graphdef, rest, tx, state_shardings)
  rows = sharding.process_rows(t.batch_size)
  batches = Batches(cfg, start, total, rows, resolve_workers(data.workers, jax.default_backend()),
                    data.prefetch)
  step = start
  bar = Progress(start, total, enabled=progress if run.writer else False)
  log = MetricsHook(total, every=t.log_every, schedule=schedule, start=start, batches=batches,
                    tokens_per_step=t.batch_size * data.seq_len,
                    sinks=record_hooks(total, t.log_every, run=run, writer=writer, bar=bar,
                                       hooks=hooks, lr=t.lr))
  save = CheckpointHook(total, ckpt, hooks)
  evaluate = EvalHook(total, every=ev.every, hooks=hooks, writer=writer)
  preempt = PreemptionHook(total, run=run, save=save, ckpt=ckpt)
  try:
    with _StopFlag() as stop:
      vote = jax.process_count() > 1           # processes agree on stopping through the step
      voted = None                             # the previous step's answer (still on device)
      pending = None                           # a logged step whose metrics are read next turn
      batch = step_batch(cfg, mesh, next(batches))
      while step < total:
        if vote:                                 # this process's vote, as of this dispatch
          votes = stop_votes(len(rows), stop.signum is not None)
          batch["stop"] = step_batch(cfg, mesh, dict(stop=votes))["stop"]
        state, metrics = train_step(state, batch)
        step += 1
        # The next step's batch is made and placed while this one runs: a save or an
        # evaluation below waits for this step, and the next is then dispatched at once.
        batch = step_batch(cfg, mesh, next(batches)) if step < total else None
        if pending is not None:                # step - 1's metrics: step is queued behind it
          log(pending)
          pending = None
        # One process: stop now. Several: stop when the step before this one says any process
        # voted (read only now, so the host stays a step ahead); all see it at the same step.
        stopping = (stop.signum is not None if not vote
                    else voted is not None and float(voted) > 0)
        voted = metrics.pop("stop", None)
        view = StepView(step, state, metrics)
        # A checkpoint or an evaluation needs this step's state before the next step (which
        # takes the state's buffers) is dispatched, so its record is written first, in order.
        at_rest = stopping or save.due(step) or evaluate.due(step)
        if log.due(step):
          if at_rest:
            log(view)
          else:
            pending = view
        bar.step()
        if stopping:
          preempt(view, stop.signum)
        if vote and step == start + 2:           # the first step has run (its vote was read),
          distributed.quiet_gloo_threads()        # so gloo's event loop exists
        if save.due(step):
          save(view)
        if evaluate.due(step):
          evaluate(view)
      ckpt.wait()
  except Preempted:
    raise
  except Exception as e:
    _mark_failed(run, step, total, e, ckpt)
    raise
  finally:
    batches.close()
    bar.close()
    _close_quietly(writer)
    ckpt.close()
  run.write_status("done", step, total)
  if ckpt.skipped:
    print(f"hybrid-jax: {ckpt.skipped} rolling checkpoint(s) skipped: each was due while the one "
          f"before was still being written (checkpoint.every={ck.every} steps is "
          f"shorter than a save)", file=sys.stderr, flush=True)
  if run.writer:
    for hook in hooks:
      hook.end(run)
  return run.read_status() if run.writer else dict(state="done", step=step, total_steps=total)

