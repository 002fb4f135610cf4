"""Rules of the sections no other package owns (train, checkpoint, mesh, the step budget),
the unknown-key check, and the error every package's config check raises.

This package is a leaf: it imports nothing else from hybrid_jax. The model, data and eval
packages each check their own section; ``hybrid_jax.resolve.resolve`` composes them."""

import importlib.util

import ml_collections

from hybrid_jax.configs.base import base_config
from hybrid_jax.errors import UserError


class ConfigError(UserError, ValueError):
  """A config value breaks a rule; the message is one line naming the field."""


def fail(field, rule, value):
  """Raise the one-line ConfigError naming ``config.<field>``."""
  raise ConfigError(f"config.{field}: {rule} (got {value!r})")


def is_resolved(cfg) -> bool:
  """Whether ``cfg`` came out of ``resolve`` (only resolved configs carry ``derived``)."""
  return "derived" in cfg


def require_resolved(cfg, who: str):
  """For functions that read filled shape fields or ``derived``: refuse a requested config
  instead of failing later on a ``None`` field."""
  if not is_resolved(cfg):
    raise ValueError(f"{who} needs a resolved config (hybrid_jax.resolve.resolve(cfg)); "
                     "got one without a derived section")
  return cfg


def check_keys(cfg, schema=None, prefix=""):
  """Reject keys the schema does not know (typos must not be silently ignored)."""
  schema = base_config() if schema is None else schema
  for key in cfg.keys():
    path = f"{prefix}{key}"
    if key not in schema:
      if prefix == "" and key == "derived":
        continue
      raise ConfigError(f"config.{path}: unknown key (known here: {', '.join(sorted(schema.keys()))})")
    if isinstance(schema[key], ml_collections.ConfigDict):
      if not isinstance(cfg[key], (ml_collections.ConfigDict, dict)):
        fail(path, "must be a section", cfg[key])
      check_keys(cfg[key], schema[key], path + ".")


SCHEDULES = ("cosine", "wsd", "constant")


def check_train(t):
  if t.batch_size < 1:
    fail("train.batch_size", "must be >= 1", t.batch_size)
  if not 0 < t.lr < float("inf"):          # also NaN, which every comparison lets through
    fail("train.lr", "must be a finite number > 0", t.lr)
  if t.schedule not in SCHEDULES:
    fail("train.schedule", f"must be one of {SCHEDULES}", t.schedule)
  if not 0 <= t.min_lr_ratio <= 1:          # NaN fails these too
    fail("train.min_lr_ratio", "must be in [0, 1]", t.min_lr_ratio)
  if not 0 < t.decay_fraction <= 1:
    fail("train.decay_fraction", "must be in (0, 1]", t.decay_fraction)
  if t.warmup_steps < 0:
    fail("train.warmup_steps", "must be >= 0", t.warmup_steps)
  if not 0 < t.grad_clip < float("inf"):
    fail("train.grad_clip", "must be > 0", t.grad_clip)
  if t.log_every < 1:
    fail("train.log_every", "must be >= 1", t.log_every)
  if not isinstance(t.microbatches, int) or t.microbatches < 1 or t.batch_size % t.microbatches:
    fail("train.microbatches", f"must be an integer >= 1 dividing train.batch_size={t.batch_size}",
         t.microbatches)
  if not 0 <= t.weight_decay < float("inf"):
    fail("train.weight_decay", "must be a finite number >= 0", t.weight_decay)
  if t.tokens_per_param is not None and not 0 < t.tokens_per_param < float("inf"):
    fail("train.tokens_per_param", "must be a finite number > 0", t.tokens_per_param)


def check_checkpoint(k):
  if k.every < 1:
    fail("checkpoint.every", "must be >= 1", k.every)
  if k.log_per_octave < 0:
    fail("checkpoint.log_per_octave", "must be >= 0", k.log_per_octave)
  if not isinstance(k.async_save, bool):
    fail("checkpoint.async_save", "must be True or False", k.async_save)
  problem = checkpoint_root_problem(k.root)
  if problem:
    fail("checkpoint.root", problem, k.root)


# A bucket the checkpoints may go to: orbax writes gs:// steps in place, finished by a commit
# file, and our readers list them so (hybrid_jax.run.checkpoints); no other scheme is tested.
BUCKET_SCHEME = "gs://"
# What a gs:// root needs besides orbax: etils.epath reaches the bucket through fsspec's gcsfs,
# orbax lists and deletes steps with google-cloud-storage (the module, then its pip name).
BUCKET_PACKAGES = (("gcsfs", "gcsfs"), ("google.cloud.storage", "google-cloud-storage"))


def _missing(module: str) -> bool:
  try:
    return importlib.util.find_spec(module) is None
  except (ImportError, ValueError):          # a parent package absent, or a blocked module
    return True


def checkpoint_root_problem(root) -> str | None:
  """Why ``checkpoint.root`` cannot hold a run's checkpoints, or None (None: the run's own
  directory). Said before anything is computed: a bucket whose client is not installed would
  otherwise fail at the first save, minutes in."""
  if root is None:
    return None
  if not isinstance(root, str) or not root.strip():
    return "must be gs://BUCKET/PREFIX or an absolute path"
  if "://" in root:
    if not root.startswith(BUCKET_SCHEME):
      return (f"{root.split('://', 1)[0]}:// is not supported; use gs://BUCKET/PREFIX or an "
              "absolute path on a filesystem every node mounts")
    if not root[len(BUCKET_SCHEME):].split("/", 1)[0]:
      return "names no bucket (gs://BUCKET/PREFIX)"
    missing = [pip for module, pip in BUCKET_PACKAGES if _missing(module)]
    if missing:
      return (f"a gs:// root needs {' and '.join(missing)}, not installed here: "
              "pip install 'hybrid_jax[gcs]'")
    return None
  if not root.startswith("/"):
    return "a path must be absolute (every process, and every resume, must find the same place)"
  return None


def check_mesh(h):
  for field in ("data", "fsdp"):
    v = h[field]
    if not isinstance(v, int) or isinstance(v, bool) or not (v == -1 or v >= 1):
      fail(f"mesh.{field}", "must be -1 (all remaining devices) or an integer >= 1", v)


def budget_steps(cfg, n_params: int) -> int:
  """Training steps from ``train.steps``, ``train.tokens`` or ``train.tokens_per_param``
  (a multiple of the ``n_params`` non-embedding parameters)."""
  t = cfg.train
  per_step = t.batch_size * cfg.data.seq_len
  if t.steps is not None:
    if t.steps < 1:
      fail("train.steps", "must be >= 1", t.steps)
    return t.steps
  if t.tokens is not None and t.tokens_per_param is not None:
    fail("train.tokens_per_param", "set only one of train.tokens and train.tokens_per_param "
         f"(train.tokens={t.tokens}; unset one with =None)", t.tokens_per_param)
  if t.tokens is not None:
    field, tokens = "train.tokens", t.tokens
  elif t.tokens_per_param is not None:
    field, tokens = "train.tokens_per_param", int(t.tokens_per_param * n_params)
  else:
    fail("train.steps", "one of train.steps, train.tokens, train.tokens_per_param must be set", None)
  if tokens < per_step:
    fail(field, f"token budget {tokens} is less than one batch (batch_size*seq_len = {per_step})",
         getattr(t, field.split(".")[1]))
  return tokens // per_step
