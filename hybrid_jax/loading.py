"""``load_run``: a trained run as (config, model) for notebooks and exporters.

Only the parameters are read (an orbax partial restore into an abstract model): the
optimizer moments, twice the parameters' size, are never built nor loaded, and the arrays
land on this process's first local device whatever mesh the run was trained on.
"""

import jax

from hybrid_jax.core.params_state import abstract_model
from hybrid_jax.flax_nnx import nnx
from hybrid_jax.resolve import resolve
from hybrid_jax.run import RunDirError, checkpoint_steps, load_config
from hybrid_jax.run.restore import open_read_only, restore_params


class LoadError(RunDirError):
  """A run or step that cannot be loaded: one line."""


def load_run(workdir, step: int | None = None):
  """(resolved config, model) of checkpoint ``step`` of the run in ``workdir`` (default:
  its latest). ``model(tokens_BxT)`` gives float32 logits [B, T, V]; decoding is
  ``hybrid_jax.model.lm.decode`` / ``model.decode_step``. A missing run or step raises a
  one-line ``LoadError`` before anything is read."""
  try:
    cfg = resolve(load_config(workdir))
    steps = checkpoint_steps(workdir)
  except RunDirError as e:
    raise LoadError(str(e)) from None
  if step is None:
    step = steps[-1]
  elif step not in steps:
    raise LoadError(f"{workdir} has no checkpoint at step {step} "
                    f"(it has {', '.join(map(str, steps))})")
  graphdef, abstract_params, rest = abstract_model(cfg.model, cfg.train.seed)
  if jax.tree.leaves(rest):   # every model variable is a Param today; say so if that changes
    raise LoadError("the model holds non-parameter state that checkpoints do not restore")
  manager = open_read_only(workdir)
  try:
    params = restore_params(manager, workdir, step, abstract_params,
                            jax.sharding.SingleDeviceSharding(jax.local_devices()[0]))
  except RunDirError as e:
    raise LoadError(str(e)) from None
  finally:
    manager.close()
  return cfg, nnx.merge(graphdef, params, rest)
