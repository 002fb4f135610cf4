"""Validation and resolution: every rule fails with one line naming the field, before any
compute. ``resolve`` fills shape fields from the named size and derives the step budget."""

import copy

import ml_collections

from hybrid_jax.configs import sizes
from hybrid_jax.configs.base import base_config

POS_SCHEMES = ("rope", "nope")
SCHEDULES = ("cosine", "wsd", "constant")
DTYPES = ("float32", "bfloat16")
DATASETS = ("synthetic", "mix")
SHAPE_FIELDS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff")


class ConfigError(ValueError):
  """A config value breaks a rule; the message is one line naming the field."""


def _fail(field, rule, value):
  raise ConfigError(f"config.{field}: {rule} (got {value!r})")


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
        _fail(path, "must be a section", cfg[key])
      check_keys(cfg[key], schema[key], path + ".")


def _fill_shape(m):
  if m.size != "custom":
    if m.size not in sizes.SIZES:
      _fail("model.size", f"must be 'custom' or one of {', '.join(sizes.SIZES)}", m.size)
    size = sizes.SIZES[m.size]
    for f in SHAPE_FIELDS:
      if m[f] is None and f != "d_ff":
        m[f] = getattr(size, f)
  for f in SHAPE_FIELDS[:-1]:
    if m[f] is None:
      _fail(f"model.{f}", "must be set when model.size is 'custom'", None)


def _check_model(m):
  from hybrid_jax.model import registry
  for f in SHAPE_FIELDS[:-1]:
    if not isinstance(m[f], int) or m[f] < 1:
      _fail(f"model.{f}", "must be a positive integer", m[f])
  if m.d_model % m.n_heads:
    _fail("model.n_heads", f"must divide model.d_model={m.d_model}", m.n_heads)
  if m.n_heads % m.n_kv_heads:
    _fail("model.n_kv_heads", f"must divide model.n_heads={m.n_heads}", m.n_kv_heads)
  if m.head_dim is not None and m.head_dim < 2:
    _fail("model.head_dim", "must be >= 2", m.head_dim)
  if m.head_dim is None and m.d_model // m.n_heads < 2:
    _fail("model.n_heads", "leaves head_dim = d_model / n_heads < 2", m.n_heads)
  if not isinstance(m.window, int) or m.window < 1:
    _fail("model.window", "must be an integer >= 1", m.window)
  known = registry.letters()
  if not m.pattern or any(ch not in known for ch in m.pattern):
    _fail("model.pattern", f"letters must be among {known!r}", m.pattern)
  if m.n_layers % len(m.pattern):
    _fail("model.n_layers", f"must be a multiple of the pattern length {len(m.pattern)} ({m.pattern!r})",
          m.n_layers)
  for f in ("pos_full", "pos_swa", "pos_headwise"):
    if m[f] not in POS_SCHEMES:
      _fail(f"model.{f}", f"must be one of {POS_SCHEMES}", m[f])
  if "H" in m.pattern:
    if not 0.0 < m.local_head_fraction < 1.0:
      _fail("model.local_head_fraction", "must be strictly between 0 and 1", m.local_head_fraction)
    nl, group = round(m.local_head_fraction * m.n_heads), m.n_heads // m.n_kv_heads
    if nl == 0 or nl == m.n_heads or nl % group:
      _fail("model.local_head_fraction",
            f"must give a number of windowed heads (of {m.n_heads}) that is a positive multiple "
            f"of the GQA group size {group} and not all heads", m.local_head_fraction)
  if m.rope_theta <= 0:
    _fail("model.rope_theta", "must be > 0", m.rope_theta)
  if m.vocab_size < 2:
    _fail("model.vocab_size", "must be >= 2", m.vocab_size)
  if m.dtype not in DTYPES:
    _fail("model.dtype", f"must be one of {DTYPES}", m.dtype)
  from pallas_kernels.swa.api import IMPLEMENTATIONS
  if m.attention_impl not in IMPLEMENTATIONS:
    _fail("model.attention_impl", f"must be one of {IMPLEMENTATIONS}", m.attention_impl)
  from pallas_kernels.linear_scan.api import IMPLEMENTATIONS as REC_IMPLS
  if m.recurrent_impl not in REC_IMPLS:
    _fail("model.recurrent_impl", f"must be one of {REC_IMPLS}", m.recurrent_impl)
  for f in ("chunk_size", "conv_kernel", "ssm_expand", "ssm_state", "ssm_head_dim", "gdn_expand_v"):
    if not isinstance(m[f], int) or m[f] < 1:
      _fail(f"model.{f}", "must be an integer >= 1", m[f])
  if "M" in m.pattern and (m.ssm_expand * m.d_model) % m.ssm_head_dim:
    _fail("model.ssm_head_dim", f"must divide d_inner = ssm_expand * d_model = "
          f"{m.ssm_expand * m.d_model}", m.ssm_head_dim)
  if m.d_ff is not None and m.d_ff < 1:
    _fail("model.d_ff", "must be a positive integer", m.d_ff)
  from hybrid_jax.model.lm import REMAT_POLICIES
  if m.remat not in REMAT_POLICIES:
    _fail("model.remat", f"must be one of {tuple(REMAT_POLICIES)}", m.remat)


def _check_data(d, vocab_size):
  if d.name not in DATASETS:
    _fail("data.name", f"must be one of {DATASETS}", d.name)
  if not isinstance(d.seq_len, int) or d.seq_len < 2:
    _fail("data.seq_len", "must be an integer >= 2", d.seq_len)
  if d.n_pairs < 0 or 6 * d.n_pairs > d.seq_len:
    _fail("data.n_pairs", f"must be in [0, seq_len/6 = {d.seq_len // 6}]", d.n_pairs)
  if not 1 <= d.min_distance < d.seq_len:
    _fail("data.min_distance", f"must be in [1, seq_len={d.seq_len})", d.min_distance)
  if d.name == "synthetic":
    from hybrid_jax.data.synthetic import MIN_VOCAB
    if vocab_size < MIN_VOCAB:
      _fail("model.vocab_size", f"synthetic data needs >= {MIN_VOCAB} tokens", vocab_size)
  from hybrid_jax.data.config_rules import check_data   # tokenizer, corpus and mix rules
  check_data(d, vocab_size, _fail)


def _check_train(t):
  if t.batch_size < 1:
    _fail("train.batch_size", "must be >= 1", t.batch_size)
  if t.lr <= 0:
    _fail("train.lr", "must be > 0", t.lr)
  if t.schedule not in SCHEDULES:
    _fail("train.schedule", f"must be one of {SCHEDULES}", t.schedule)
  if not 0 <= t.min_lr_ratio <= 1:
    _fail("train.min_lr_ratio", "must be in [0, 1]", t.min_lr_ratio)
  if not 0 < t.decay_fraction <= 1:
    _fail("train.decay_fraction", "must be in (0, 1]", t.decay_fraction)
  if t.warmup_steps < 0:
    _fail("train.warmup_steps", "must be >= 0", t.warmup_steps)
  if t.grad_clip <= 0:
    _fail("train.grad_clip", "must be > 0", t.grad_clip)
  if t.log_every < 1:
    _fail("train.log_every", "must be >= 1", t.log_every)
  if not isinstance(t.microbatches, int) or t.microbatches < 1 or t.batch_size % t.microbatches:
    _fail("train.microbatches", f"must be an integer >= 1 dividing train.batch_size={t.batch_size}",
          t.microbatches)


def _check_checkpoint(k):
  if k.every < 1:
    _fail("checkpoint.every", "must be >= 1", k.every)
  if k.log_per_octave < 0:
    _fail("checkpoint.log_per_octave", "must be >= 0", k.log_per_octave)


def _check_eval(e):
  """Evaluation settings (section ``eval``); task names and minimum lengths come from
  ``hybrid_jax.data.tasks`` (see ``hybrid_jax.eval.settings``)."""
  from hybrid_jax.eval.settings import check_eval_section
  check_eval_section(e, _fail)


def _budget(cfg, n_params):
  t = cfg.train
  per_step = t.batch_size * cfg.data.seq_len
  if t.steps is not None:
    if t.steps < 1:
      _fail("train.steps", "must be >= 1", t.steps)
    return t.steps
  if t.tokens is not None and t.tokens_per_param is not None:
    _fail("train.tokens_per_param", "set only one of train.tokens and train.tokens_per_param "
          f"(train.tokens={t.tokens}; unset one with =None)", t.tokens_per_param)
  if t.tokens is not None:
    field, tokens = "train.tokens", t.tokens
  elif t.tokens_per_param is not None:
    field, tokens = "train.tokens_per_param", int(t.tokens_per_param * n_params)
  else:
    _fail("train.steps", "one of train.steps, train.tokens, train.tokens_per_param must be set", None)
  if tokens < per_step:
    _fail(field, f"token budget {tokens} is less than one batch (batch_size*seq_len = {per_step})",
          getattr(t, field.split(".")[1]))
  return tokens // per_step


def validate(cfg) -> None:
  """Raise ConfigError on the first broken rule; changes nothing."""
  resolve(cfg)


def resolve(cfg) -> ml_collections.ConfigDict:
  """A validated copy with shape fields filled and a ``derived`` section (steps, N, ...)."""
  check_keys(cfg)
  out = ml_collections.ConfigDict(copy.deepcopy(cfg.to_dict()))
  if "derived" in out:
    del out["derived"]
  m = out.model
  _fill_shape(m)
  _check_model(m)
  if m.d_ff is None:   # the size's MLP ratio, then matched to the full-attention baseline
    size = sizes.SIZES.get(m.size)
    ratio = size.d_ff / size.d_model if size else sizes.DEFAULT_FF_RATIO
    m.d_ff = sizes.round_d_ff(ratio * m.d_model)
    target = _baseline_params(m)
    if abs(sizes.non_embedding_params(m) - target) > sizes.MATCH_TOLERANCE * target:
      m.d_ff = sizes.match_d_ff(m, target)
  _check_data(out.data, m.vocab_size)
  _check_train(out.train)
  _check_checkpoint(out.checkpoint)
  for field in ("data", "fsdp"):
    v = out.mesh[field]
    if not isinstance(v, int) or isinstance(v, bool) or not (v == -1 or v >= 1):
      _fail(f"mesh.{field}", "must be -1 (all remaining devices) or an integer >= 1", v)
  _check_eval(out.eval)
  if out.data.seed is None:
    out.data.seed = out.train.seed
  n = sizes.non_embedding_params(m)
  steps = _budget(out, n)
  out.derived = ml_collections.ConfigDict(dict(
      steps=steps, tokens=steps * out.train.batch_size * out.data.seq_len,
      non_embedding_params=n, embedding_params=sizes.embedding_params(m),
      layers=sizes.layer_letters(m.pattern, m.n_layers)))
  from hybrid_jax.data.config_rules import data_fingerprint
  fingerprint = data_fingerprint(out.data)
  if fingerprint is not None:           # absent for byte tokens on generated data: old runs resume
    out.derived.data_fingerprint = fingerprint
  return out


def _baseline_params(m) -> int:
  """Non-embedding parameters of the full-attention baseline at the same shape."""
  base = copy.deepcopy(m)
  base.pattern = "F"
  return sizes.non_embedding_params(base)
