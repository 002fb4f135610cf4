"""The train package's typed, frozen views of the resolved ``train``, ``checkpoint`` and
``mesh`` sections (their rules are ``hybrid_jax.configs.rules``): the loop, the step and
optimizer builders, the checkpointer and the mesh read these, not the ConfigDict."""

import dataclasses

from hybrid_jax.configs.typed import FrozenSection


@dataclasses.dataclass(frozen=True)
class TrainConfig(FrozenSection):
  """Every key of ``base_config().train``, under the same names (see configs/base.py)."""
  SECTION = "train"
  OPTIONAL = ("steps", "tokens", "tokens_per_param")   # the budget: resolve derives the steps

  batch_size: int                 # rows per step (all processes together)
  steps: int | None               # the budget in steps (overrides tokens)
  tokens: int | None              # ... in tokens
  tokens_per_param: float | None  # ... as a multiple of the non-embedding parameters
  seed: int                       # the parameters' init seed (and the data's by default)
  lr: float                       # peak learning rate
  min_lr_ratio: float             # the schedule's floor, a share of lr
  warmup_steps: int               # linear warmup
  schedule: str                   # cosine | wsd | constant
  decay_fraction: float           # wsd: share of steps spent decaying
  weight_decay: float             # AdamW's (matrices only)
  b1: float                       # AdamW's first-moment decay
  b2: float                       # AdamW's second-moment decay
  grad_clip: float                # global gradient-norm clip
  log_every: int                  # metrics cadence (steps)
  microbatches: int               # gradient accumulation: equal parts of the batch


@dataclasses.dataclass(frozen=True)
class CheckpointConfig(FrozenSection):
  """Every key of ``base_config().checkpoint``, under the same names."""
  SECTION = "checkpoint"
  OPTIONAL = ("root",)

  every: int             # rolling (latest) checkpoint cadence
  log_per_octave: int    # kept log-spaced checkpoints per doubling of steps
  log_min_step: int      # the first log-spaced step
  async_save: bool       # write in a thread; the loop waits only for the host copy
  root: str | None       # where the steps go (None: <run>/checkpoints; hybrid_jax.run.checkpoints)


@dataclasses.dataclass(frozen=True)
class MeshConfig(FrozenSection):
  """Every key of ``base_config().mesh``, under the same names."""
  SECTION = "mesh"

  data: int              # devices on the data-parallel axis (-1: all the rest)
  fsdp: int              # devices over which parameters and optimizer state are split (-1: the rest)
