"""The training loop: resolve, resume, train, log, checkpoint, evaluate (``eval.every``),
handle preemption."""

import json
import math
import signal
import sys
import time

import jax
from flax import nnx
from tqdm import tqdm

from hybrid_jax.configs import ConfigError, resolve
from hybrid_jax.data import make_source
from hybrid_jax.model import build_model
from hybrid_jax.train import distributed, sharding
from hybrid_jax.train.checkpoint import Checkpointer
from hybrid_jax.train.optim import make_optimizer
from hybrid_jax.train.rundir import RunDir, RunDirError
from hybrid_jax.train.step import make_train_step

PREEMPTED_EXIT_CODE = 143


class _NoWriter:
  """The TensorBoard writer of processes other than process 0."""

  def add_scalar(self, *args, **kwargs):
    pass

  def close(self):
    pass


class Preempted(Exception):
  """Training stopped on SIGTERM/SIGINT after saving a checkpoint."""


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


def init_state(cfg, mesh=None):
  """(graphdef, rest, state, tx, schedule); state = {params, opt_state} is the pure pytree
  that is checkpointed. Initialisation runs as one compiled program, not op by op; with a
  ``mesh`` every array is created directly in its sharding (no device holds the whole)."""
  tx, schedule = make_optimizer(cfg.train, cfg.derived.steps)

  def init():
    model = build_model(cfg.model, cfg.train.seed)
    _, params, rest = nnx.split(model, nnx.Param, ...)
    return dict(params=params, opt_state=tx.init(params)), rest

  graphdef = nnx.split(nnx.eval_shape(lambda: build_model(cfg.model, cfg.train.seed)))[0]
  out_shardings = None
  if mesh is not None:
    abstract_state, abstract_rest = jax.eval_shape(init)
    out_shardings = (sharding.state_shardings(mesh, abstract_state),
                     jax.tree.map(lambda _: sharding.replicated(mesh), abstract_rest))
  state, rest = jax.jit(init, out_shardings=out_shardings)()
  return graphdef, rest, state, tx, schedule


def train(cfg, workdir, *, progress: bool | None = None) -> dict:
  """Train (or resume) the run in ``workdir``; returns its final status."""
  cfg = resolve(cfg)                       # ConfigError here: nothing computed, nothing written
  if cfg.eval.every:                       # bad eval settings too (EvalInputError, one line)
    from hybrid_jax.eval.evaluate import check_settings
    check_settings(cfg)
  distributed.initialize()                 # before JAX starts a backend (multi-host jobs)
  if cfg.eval.every and jax.process_count() > 1:
    raise ConfigError("config.eval.every: evaluation during multi-process training is not "
                      "supported; evaluate the checkpoints afterwards with hybrid-jax eval")
  sharding.check_mesh(cfg)                 # MeshError (a ConfigError): before anything is written
  config = json.loads(cfg.to_json())
  run = RunDir(workdir, writer=distributed.is_primary())
  run.lock()
  try:
    run.check_or_write_config(config)
    return _train_locked(cfg, run, progress)
  finally:
    run.unlock()


def _train_locked(cfg, run, progress) -> dict:
  total = cfg.derived.steps

  mesh = sharding.make_mesh(cfg.mesh)
  graphdef, rest, state, tx, schedule = init_state(cfg, mesh)
  state_shardings = sharding.state_shardings(mesh, state)
  ckpt = Checkpointer(run.checkpoint_dir.absolute(), cfg.checkpoint, total)
  start = ckpt.latest_step() or 0
  if start:
    try:   # onto this run's mesh, whatever mesh saved it
      state = ckpt.restore(start, jax.tree.map(
          lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), state, state_shardings))
    except Exception as e:  # a corrupt or foreign checkpoint: say so, touch nothing
      raise RunDirError(f"cannot restore checkpoint {start} in {run.checkpoint_dir}: "
                        f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from e
  from hybrid_jax.eval.evaluate import TrainingEval
  try:
    evaluate = TrainingEval(cfg, run, graphdef, rest)
    evaluate(start, state["params"])       # a crash between checkpoint and eval record
  except Exception as e:                   # e.g. the reference run is gone: say so, stop cleanly
    ckpt.close()
    run.write_status("failed", start, total, f"{type(e).__name__}: {e}".splitlines()[0])
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
    from tensorboardX import SummaryWriter
    writer = SummaryWriter(str(run.tensorboard_dir), purge_step=start + 1 if start else None)
  else:
    writer = _NoWriter()
  source = make_source(cfg)
  train_step = make_train_step(graphdef, rest, tx, mesh=mesh, state_shardings=state_shardings,
                               microbatches=cfg.train.microbatches, batch_size=cfg.train.batch_size)
  rows = sharding.process_rows(cfg.train.batch_size)
  tokens_per_step = cfg.train.batch_size * cfg.data.seq_len
  step = start
  bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True, file=sys.stderr,
             disable=not run.writer or (None if progress is None else not progress))
  try:
    with _StopFlag() as stop:
      t_last, step_last = time.perf_counter(), start
      while step < total:
        batch = sharding.global_batch(mesh, source.batch(step, rows=rows),
                                      cfg.train.batch_size // cfg.train.microbatches)
        state, metrics = train_step(state, batch)
        step += 1
        if step % cfg.train.log_every == 0 or step == total:
          metrics = {k: float(v) for k, v in jax.device_get(metrics).items()}
          if not math.isfinite(metrics["loss"]):
            raise FloatingPointError(f"loss is {metrics['loss']} at step {step}")
          now = time.perf_counter()
          tps = (step - step_last) * tokens_per_step / max(now - t_last, 1e-9)
          t_last, step_last = now, step
          record = dict(step=step, tokens=step * tokens_per_step, loss=metrics["loss"],
                        lr=float(schedule(step - 1)), grad_norm=metrics["grad_norm"],
                        tokens_per_s=tps, answer_loss=metrics["answer_loss"],
                        answer_acc=metrics["answer_acc"])
          run.append_metrics(record)
          for k, v in record.items():
            if k != "step":
              writer.add_scalar(f"train/{k}", v, step)
          bar.set_postfix(tokens=f"{record['tokens']:.3g}", loss=f"{record['loss']:.3f}",
                          tok_s=f"{tps:.3g}")
        bar.update(1)
        if distributed.any_process(stop.signum is not None):
          ckpt.save(step, state, force=True)
          run.write_status("preempted", step, total, f"stopped by signal {stop.signum}")
          raise Preempted(f"preempted at step {step}/{total}; rerun the same command to resume")
        ckpt.save(step, state, force=step == total)
        if (record := evaluate(step, state["params"])) is not None:
          for k, v in record.items():
            if k not in ("step", "settings_id") and isinstance(v, (int, float)):
              writer.add_scalar(f"eval/{k}", v, step)
  except Preempted:
    raise
  except Exception as e:
    run.write_status("failed", step, total, f"{type(e).__name__}: {e}".splitlines()[0])
    raise
  finally:
    bar.close()
    writer.close()
    ckpt.close()
  run.write_status("done", step, total)
  if run.writer:
    from hybrid_jax.plot.curves import write_training_curves
    write_training_curves(run)
  return run.read_status() if run.writer else dict(state="done", step=step, total_steps=total)

