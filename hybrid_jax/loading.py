"""``load_run``: a trained run as (config, model) for notebooks and exporters.

Only the parameters are read (an orbax partial restore into an abstract model): the
optimizer moments, twice the parameters' size, are never built nor loaded, and the arrays
land on this process's first local device whatever mesh the run was trained on.
"""

import logging
from pathlib import Path

import jax
import orbax.checkpoint as ocp
from flax import nnx

from hybrid_jax.resolve import resolve
from hybrid_jax.eval.checkpoints import EvalInputError, checkpoint_steps, load_run_config
from hybrid_jax.model.lm import build_model


class LoadError(EvalInputError):
  """A run or step that cannot be loaded: one line."""


def abstract_model(model_cfg, seed: int = 0):
  """(graphdef, abstract params, rest): the model's structure with no array allocated."""
  return nnx.split(nnx.eval_shape(lambda: build_model(model_cfg, seed)), nnx.Param, ...)


def restore_params(workdir, step: int, abstract_params, device=None):
  """The Param state of checkpoint ``step``, onto ``device`` (default: first local one)."""
  device = device or jax.local_devices()[0]
  sharding = jax.sharding.SingleDeviceSharding(device)
  restore_args = jax.tree.map(lambda x: ocp.ArrayRestoreArgs(dtype=x.dtype, sharding=sharding),
                              abstract_params)
  target = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=sharding),
                        abstract_params)
  path = Path(workdir).absolute() / "checkpoints"
  absl_logger = logging.getLogger("absl")   # read-only opening warns; that is what we want
  level = absl_logger.level
  absl_logger.setLevel(logging.ERROR)
  try:
    manager = ocp.CheckpointManager(
        path, options=ocp.CheckpointManagerOptions(read_only=True, create=False))
  finally:
    absl_logger.setLevel(level)
  try:
    state = manager.restore(step, args=ocp.args.PyTreeRestore(
        item=dict(params=target), restore_args=dict(params=restore_args), partial_restore=True))
  except Exception as e:  # a corrupt or foreign checkpoint
    first = str(e).splitlines()[0] if str(e) else ""
    raise LoadError(f"cannot restore checkpoint {step} of {workdir}: {type(e).__name__}: {first}") from e
  finally:
    manager.close()
  return state["params"]


def load_run(workdir, step: int | None = None):
  """(resolved config, model) of checkpoint ``step`` of the run in ``workdir`` (default:
  its latest). ``model(tokens_BxT)`` gives float32 logits [B, T, V]; decoding is
  ``hybrid_jax.model.lm.decode`` / ``model.decode_step``. A missing run or step raises a
  one-line ``LoadError`` before anything is read."""
  try:
    cfg = resolve(load_run_config(workdir))
    steps = checkpoint_steps(workdir)
  except EvalInputError as e:
    raise LoadError(str(e)) from None
  if step is None:
    step = steps[-1]
  elif step not in steps:
    raise LoadError(f"{workdir} has no checkpoint at step {step} "
                    f"(it has {', '.join(map(str, steps))})")
  graphdef, abstract_params, rest = abstract_model(cfg.model, cfg.train.seed)
  if jax.tree.leaves(rest):   # every model variable is a Param today; say so if that changes
    raise LoadError("the model holds non-parameter state that checkpoints do not restore")
  params = restore_params(workdir, step, abstract_params)
  return cfg, nnx.merge(graphdef, params, rest)
