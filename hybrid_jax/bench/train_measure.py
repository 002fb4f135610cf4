"""What ``hybrid-jax bench train`` measures, in the process that runs the step: the shapes of
the toy family, a train step's wall time, its compiled memory, and the breakdown. The
breakdown splits the compiled step's op time by the named scopes the model sets
(``bench.profile``), scaled to the step's wall time, and times the host-side work the
training loop does between steps: building the batch, putting it on the device, fetching
metrics at a log step, the checkpoint check; and a checkpoint save, beside the same state
saved one array per leaf (``run.packed_state``)."""

import os
import tempfile

import jax
import orbax.checkpoint as ocp

from hybrid_jax.bench import run_config
from hybrid_jax.bench.profile import op_time_by_group
from hybrid_jax.bench.timing import median_seconds
from hybrid_jax.data import make_source
from hybrid_jax.model.flops import model_flops_per_token
from hybrid_jax.resolve import resolve
from hybrid_jax.train import distributed, sharding
from hybrid_jax.train.checkpoint import Checkpointer
from hybrid_jax.train.state import init_state
from hybrid_jax.train.step import step_for

# Shapes of the toy family (config overrides of the toy default).
_D256 = {"model.size": "custom", "model.d_model": 256, "model.n_layers": 4, "model.n_heads": 4,
         "model.n_kv_heads": 2, "model.window": 128, "data.seq_len": 512}
SHAPES = {
    "toy": {},                                             # d64, 4 layers, SF, w32, T256, B8
    "toy-8L": {"model.n_layers": 8},
    "toy-SSSF": {"model.pattern": "SSSF"},
    "toy-B4": {"train.batch_size": 4},
    "d256": _D256,                                         # d256, 4 layers, SF, w128, T512, B8
    "d256-SSSF": {**_D256, "model.pattern": "SSSF"},
    "d256-B4": {**_D256, "train.batch_size": 4},
}


def shape_config(name: str, path=None, argv=()):
  """The resolved config of a named shape: ``--config FILE``'s (``path``; default: the toy
  default) with the shape's keys set, then the ``--config.KEY=VALUE`` overrides ``argv``."""

  def shape(c):
    for key, value in SHAPES[name].items():
      section, field = key.split(".")
      c[section][field] = value
  return resolve(run_config(path, argv, setup=shape))


def make_step(cfg, donate: bool = True, mesh=None):
  """(jitted train step, initial state) of a resolved config; sharded over ``mesh`` if given."""
  graphdef, rest, state, tx, _ = init_state(cfg, mesh)
  shardings = sharding.state_shardings(mesh, state) if mesh is not None else None
  return step_for(cfg, graphdef, rest, tx, mesh=mesh, state_shardings=shardings,
                  donate=donate), state


def step_memory(cfg, donate: bool) -> dict:
  """Bytes of the compiled step (``memory_analysis``): what donation saves is the state copy
  the output would otherwise need (``aliased``), read off the compiler, not timed."""
  step_fn, state = make_step(cfg, donate)
  m = step_fn.lower(state, make_source(cfg).batch(0)).compile().memory_analysis()
  live = (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
          + m.temp_size_in_bytes)
  return dict(donate=donate, state=sum(x.nbytes for x in jax.tree.leaves(state)),
              aliased=m.alias_size_in_bytes, temps=m.temp_size_in_bytes, live=live)


def stepper(cfg, donate: bool = True, mesh=None):
  """A call that runs one train step of ``cfg`` and returns its metrics, after one compile
  step; its batches are already on the device(s) (the loop's data work is timed apart, in
  ``host_seconds``)."""
  step_fn, state = make_step(cfg, donate, mesh)
  source = make_source(cfg)
  rows = sharding.process_rows(cfg.train.batch_size)          # this process's share
  put = ((lambda b: sharding.global_batch(mesh, b)) if mesh is not None else jax.device_put)
  batches = [put(source.batch(s, rows=rows)) for s in range(11)]
  carry = dict(state=state, i=0)

  def one_step():
    carry["state"], metrics = step_fn(carry["state"], batches[carry["i"] % len(batches)])
    carry["i"] += 1
    return metrics
  jax.block_until_ready(one_step())             # compiles; the first collectives start gloo
  distributed.quiet_gloo_threads()              # as the training loop does after its first step
  return one_step


def project_step_seconds(cfg, steps: int, donate: bool = True, mesh=None) -> float:
  """Median wall time of ``steps`` train steps after one compile step (``stepper``)."""
  return median_seconds(stepper(cfg, donate, mesh), reps=steps, warmup=0)


def host_seconds(cfg, reps: int = 20) -> dict:
  """Median seconds of the host-side work of one training-loop step (loop.py's order)."""
  step_fn, state = make_step(cfg)
  source = make_source(cfg)
  mesh = sharding.make_mesh(cfg.mesh)
  counter = iter(range(10 ** 9))
  out = dict(data_batch=median_seconds(lambda: source.batch(next(counter)), reps),
             device_put=median_seconds(lambda: sharding.global_batch(mesh, source.batch(0)), reps))
  out["device_put"] = max(out["device_put"] - out["data_batch"], 0.0)
  state, metrics = step_fn(state, jax.device_put(source.batch(0)))
  fetch = median_seconds(lambda: {k: float(v) for k, v in jax.device_get(metrics).items()}, reps)
  out["metrics_per_step"] = fetch / cfg.train.log_every      # fetched at log steps only
  with tempfile.TemporaryDirectory() as d:
    ckpt = Checkpointer(os.path.join(d, "checkpoints"), cfg.checkpoint, cfg.derived.steps)
    off_steps = iter(s for s in range(2, 10 ** 9) if s % cfg.checkpoint.every and s & (s - 1))
    out["checkpoint_check"] = median_seconds(lambda: ckpt.save(next(off_steps), state), reps, 0)
    # A save as the loop makes it (packed when small: ``run.packed_state``), and, as the
    # baseline in the same run, the same state saved one array per leaf (orbax's own form).
    saves = iter(range(10 ** 9, 2 * 10 ** 9))
    out["checkpoint_save"] = median_seconds(     # the whole save (the loop waits for less)
        lambda: (ckpt.save(next(saves), state, True), ckpt.wait()), 5)
    out["checkpoint_save_per_array"] = median_seconds(lambda: ckpt.manager.save(
        next(saves), args=ocp.args.StandardSave(state), force=True), 5)
    ckpt.close()
  return out


def breakdown(cfg, step_s: float) -> dict:
  """Milliseconds per step by op group (op-time shares scaled to the wall step) and of the
  host-side work between steps."""
  step_fn, state = make_step(cfg, donate=False)   # profiled repeatedly on the same state
  batch = jax.device_put(make_source(cfg).batch(0))
  jax.block_until_ready(step_fn(state, batch))
  groups = op_time_by_group(step_fn, state, batch)
  total = sum(groups.values())
  device = {g: round(1e3 * step_s * t / total, 2) for g, t in groups.items()}
  host = {k: round(1e3 * v, 3) for k, v in host_seconds(cfg).items()}
  return dict(device_ms=device, host_ms=host)


def model_flops_per_s(cfg, step_s: float) -> float:
  return model_flops_per_token(cfg) * cfg.train.batch_size * cfg.data.seq_len / step_s
