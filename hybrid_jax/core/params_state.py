"""The model's params-only state: readers of a run (evaluation, loading, analyses, benches)
build the model's structure here, and never the optimizer moments; the train state
(``hybrid_jax.train.state``) builds on it."""

import jax

from hybrid_jax.configs import require_resolved
from hybrid_jax.flax_nnx import nnx
from hybrid_jax.model import build_model


def abstract_model(model_cfg, seed: int = 0):
  """(graphdef, abstract params, rest): the model's structure with no array allocated."""
  return nnx.split(nnx.eval_shape(lambda: build_model(model_cfg, seed)), nnx.Param, ...)


def init_params(cfg):
  """(graphdef, rest, params): the model's initial parameters without optimizer moments."""
  require_resolved(cfg, "init_params")

  def init():
    _, params, rest = nnx.split(build_model(cfg.model, cfg.train.seed), nnx.Param, ...)
    return params, rest

  params, rest = jax.jit(init)()
  return abstract_model(cfg.model, cfg.train.seed)[0], rest, params
