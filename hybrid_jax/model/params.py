"""Parameter counts and layer letters of a model config, from each mixer's registered
``param_count``; and the d_ff that matches a pattern to its full-attention baseline."""

import copy

from hybrid_jax.model import registry

MATCH_TOLERANCE = 0.05
D_FF_MULTIPLE = 16
DEFAULT_FF_RATIO = 2.5


def layer_letters(pattern: str, n_layers: int) -> str:
  return (pattern * (n_layers // max(1, len(pattern)) + 1))[:n_layers]


def round_d_ff(x: float) -> int:
  return max(D_FF_MULTIPLE, round(x / D_FF_MULTIPLE) * D_FF_MULTIPLE)


def mlp_params(d_model: int, d_ff: int) -> int:
  return 3 * d_model * d_ff   # SwiGLU: gate, up, down


def non_embedding_params(model) -> int:
  """Non-embedding parameters of a filled model section (norms, mixers, MLPs)."""
  d = model.d_model
  total = d  # final norm
  for letter in layer_letters(model.pattern, model.n_layers):
    total += 2 * d + registry.get(letter).param_count(model) + mlp_params(d, model.d_ff)
  return total  # input embedding and (untied) LM head excluded


def embedding_params(model) -> int:
  return model.vocab_size * model.d_model * (1 if model.tie_embeddings else 2)


def baseline_params(model) -> int:
  """Non-embedding parameters of the full-attention baseline at the same shape."""
  base = copy.deepcopy(model)
  base.pattern = "F"
  return non_embedding_params(base)


def match_d_ff(model, target: int) -> int:
  """The d_ff (a multiple of D_FF_MULTIPLE) whose model is nearest to ``target`` parameters."""
  probe = copy.deepcopy(model)
  probe.d_ff = 0
  base = non_embedding_params(probe)
  per_unit = mlp_params(model.d_model, 1) * model.n_layers
  return round_d_ff((target - base) / per_unit)
