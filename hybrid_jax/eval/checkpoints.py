"""A run's saved checkpoints as models: the params of any step, read without touching the
run (a read-only orbax manager, params only; see ``hybrid_jax.run.checkpoints``)."""

import jax

from hybrid_jax.core.params_state import abstract_model
from hybrid_jax.errors import UserError
from hybrid_jax.resolve import resolve
from hybrid_jax.run import RunDir, checkpoint_steps, load_config
from hybrid_jax.run.restore import open_read_only, restore_params


class EvalInputError(UserError, ValueError):
  """Evaluation cannot run as asked (no run, no checkpoints, bad settings): one line."""


class RunModels:
  """Restores the params of any checkpoint step of one run; ``graphdef``/``rest`` are the
  static parts every step shares (so one jitted forward serves all steps)."""

  def __init__(self, workdir, cfg=None):
    self.run = RunDir(workdir)
    self.cfg = resolve(cfg if cfg is not None else load_config(workdir))
    self.steps = checkpoint_steps(workdir)
    # Params only, into this process's first device whatever mesh the run was trained on.
    self.graphdef, self._abstract, self.rest = abstract_model(self.cfg.model, self.cfg.train.seed)
    if jax.tree.leaves(self.rest):   # checkpoints hold params only; say so if that changes
      raise EvalInputError("the model holds non-parameter state that checkpoints do not restore")
    self._sharding = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    self._manager = open_read_only(workdir)

  def params(self, step: int):
    if step not in self.steps:
      raise EvalInputError(f"{self.run.checkpoint_dir} has no checkpoint {step} "
                           f"(it has {', '.join(map(str, self.steps))})")
    return restore_params(self._manager, self.run.path, step, self._abstract, self._sharding)

  def close(self):
    self._manager.close()
