"""``EvalConfig``: the typed, frozen view of a resolved ``eval`` section, as the user wrote
it (the rules are ``eval_settings.check_eval_section``; ``EvalSettings`` is what the
evaluators compute with, derived from it and ``data.seq_len``)."""

import dataclasses

from hybrid_jax.configs.typed import FrozenSection


@dataclasses.dataclass(frozen=True)
class EvalConfig(FrozenSection):
  """Every key of ``base_config().eval``, under the same names (see configs/base.py)."""
  SECTION = "eval"
  OPTIONAL = ("every", "short_length", "reference", "reference_step")

  every: int | None               # training: evaluate every k steps (None: off)
  tasks: str                      # comma-separated task names, "all", or ""
  lengths: tuple[int, ...]        # context lengths of the synthetic tasks
  depths: tuple[float, ...]       # needle depths (fraction of the context before the needle)
  examples: int                   # examples per (task, length, depth)
  seed: int                       # seed of every evaluation example
  batch_tokens: int               # rows per forward pass = max(1, batch_tokens // length)
  short_length: int | None        # short-context loss length (None: data.seq_len)
  short_rows: int                 # held-out sequences for the short-context loss (0: off)
  longppl_length: int             # LongPPL: length of each long held-out sequence
  longppl_rows: int               # LongPPL: number of long sequences (0: off)
  longppl_window: int             # LongPPL: truncated context for key-token selection
  longppl_threshold: float        # LongPPL: key token when the loss drops by more (nats)
  reference: str | None           # LongPPL key tokens: run dir (None: the model)
  reference_step: int | None      # ... its checkpoint (None: its latest)
