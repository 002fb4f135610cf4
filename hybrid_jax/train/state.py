"""The train state, apart from the loop that advances it: params and optimizer moments. The
params-only state that readers of a run build lives below (``hybrid_jax.core.params_state``)."""

import jax
import numpy as np

from hybrid_jax.configs import require_resolved
# init_params is imported from here too (bench.eval): the params-only state moved to core.
from hybrid_jax.core.params_state import abstract_model, init_params  # noqa: F401
from hybrid_jax.flax_nnx import nnx
from hybrid_jax.model import build_model
from hybrid_jax.train import sharding
from hybrid_jax.train.config import TrainConfig
from hybrid_jax.train.optim import make_optimizer


def init_state(cfg, mesh=None):
  """(graphdef, rest, state, tx, schedule); state = {params, opt_state} is the pure pytree
  that is checkpointed. Initialisation runs as one compiled program, not op by op; with a
  ``mesh`` every array is created directly in its sharding (no device holds the whole)."""
  require_resolved(cfg, "init_state")
  t = TrainConfig.from_config(cfg.train)
  tx, schedule = make_optimizer(t, cfg.derived.steps)

  def init(*seed):                          # the seed: an argument, or a constant (below)
    model = build_model(cfg.model, jax.random.key(seed[0]) if seed else t.seed)
    _, params, rest = nnx.split(model, nnx.Param, ...)
    return dict(params=params, opt_state=tx.init(params)), rest

  graphdef = abstract_model(cfg.model, t.seed)[0]
  out_shardings = None
  if mesh is not None:
    abstract_state, abstract_rest = jax.eval_shape(init)
    out_shardings = (sharding.state_shardings(mesh, abstract_state),
                     jax.tree.map(lambda _: sharding.replicated(mesh), abstract_rest))
  state, rest = jax.jit(init, out_shardings=out_shardings)(*seed_argument(t.seed))
  return graphdef, rest, state, tx, schedule


def seed_argument(seed: int) -> tuple:
  """``(np.int32(seed),)``: the init program takes the seed as an argument, so runs that
  differ only in their seed share one compiled program (the persistent cache, and the
  precompile receipt, ``train.precompile``); an int32 seed gives the same key traced as
  constant, so the parameters are bitwise those of a constant seed. ``()`` (a constant) for
  a seed outside int32, and in a multi-process job: the precompile child that this serves
  runs only in one process, and the argument was not tried across processes."""
  if jax.process_count() > 1 or not -2 ** 31 <= seed < 2 ** 31:
    return ()
  return (np.int32(seed),)


def abstract_state(cfg, mesh):
  """(graphdef, rest, tx, state, shardings): the train state, optimizer moments included, as
  shapes carrying their ``mesh`` shardings; nothing is allocated (planning a run's memory)."""
  require_resolved(cfg, "abstract_state")
  t = TrainConfig.from_config(cfg.train)
  tx, _ = make_optimizer(t, cfg.derived.steps)
  graphdef, params, rest = abstract_model(cfg.model, t.seed)
  state = dict(params=params, opt_state=jax.eval_shape(tx.init, params))
  shardings = sharding.state_shardings(mesh, state)
  state = jax.tree.map(lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s),
                       state, shardings)
  return graphdef, rest, tx, state, shardings
