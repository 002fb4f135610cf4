"""``resolve``: the one place a requested config becomes a run's config. It composes each
package's own check (``model.config_rules``, ``data.config_rules``, the eval section's
``core.eval_settings``: eval resolves the runs it reads, so its rules sit below this module,
and the configs leaf's train/checkpoint/mesh rules), fills the shape fields and derives the
step budget. Every failure is one ConfigError line naming the field, before any compute.

A train command resolves once (the CLI); functions that read ``derived`` or filled shape
fields take the resolved config and check it (``hybrid_jax.configs.require_resolved``)."""

import copy
import json

import ml_collections

from hybrid_jax.configs import rules
from hybrid_jax.core.eval_settings import check_eval_section
from hybrid_jax.data.config_rules import check_data, data_fingerprint
from hybrid_jax.data.tokenizer import load_tokenizer
from hybrid_jax.model import params
from hybrid_jax.model.config_rules import resolve_model
from hybrid_jax.run import config_from_values


def resolve(cfg) -> ml_collections.ConfigDict:
  """A validated copy with shape fields filled and a ``derived`` section (steps, N, ...).
  A resolved config may be passed again: its ``derived`` is recomputed."""
  rules.check_keys(cfg)
  out = ml_collections.ConfigDict(copy.deepcopy(cfg.to_dict()))
  if "derived" in out:
    del out["derived"]
  m = out.model
  if m.vocab_size is None:   # None: the tokenizer's vocabulary flows into the model
    try:
      m.vocab_size = load_tokenizer(out.data.tokenizer).vocab_size
    except ValueError as e:
      rules.fail("data.tokenizer", f"cannot size model.vocab_size=None ({e})", out.data.tokenizer)
  resolve_model(m)
  check_data(out.data, m.vocab_size, rules.fail)
  rules.check_train(out.train)
  rules.check_checkpoint(out.checkpoint)
  rules.check_mesh(out.mesh)
  check_eval_section(out.eval, rules.fail)
  if out.data.seed is None:
    out.data.seed = out.train.seed
  n = params.non_embedding_params(m)
  steps = rules.budget_steps(out, n)
  out.derived = ml_collections.ConfigDict(dict(
      steps=steps, tokens=steps * out.train.batch_size * out.data.seq_len,
      non_embedding_params=n, embedding_params=params.embedding_params(m),
      layers=params.layer_letters(m.pattern, m.n_layers)))
  fingerprint = data_fingerprint(out.data)
  if fingerprint is not None:           # absent for byte tokens on generated data: old runs resume
    out.derived.data_fingerprint = fingerprint
  return out


def ensure_resolved(cfg) -> ml_collections.ConfigDict:
  """``cfg`` itself when it is already resolved (a train command resolves once), else
  ``resolve(cfg)``: for entry points that accept a requested or a resolved config."""
  return cfg if rules.is_resolved(cfg) else resolve(cfg)


def resolved_from_json(text: str) -> ml_collections.ConfigDict:
  """The resolved config whose ``to_json()`` is ``text``, rebuilt without resolving it again
  (the precompile child gets its parent's resolved config so: one resolve per command)."""
  values = json.loads(text)
  if "derived" not in values:
    raise ValueError("resolved_from_json needs a resolved config's JSON (with its derived "
                     "section); got a requested one")
  cfg = config_from_values(values)        # the schema's types and tuples; derived is skipped
  cfg.derived = ml_collections.ConfigDict(values["derived"])
  return cfg
