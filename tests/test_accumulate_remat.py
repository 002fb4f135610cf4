"""Gradient accumulation and rematerialisation change memory, not the step: the loss, its
gradient and the answer metrics equal the plain step's up to float rounding."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from conftest import tiny_config
from hybrid_jax.configs import ConfigError
from hybrid_jax.resolve import resolve
from hybrid_jax.data import make_source
from hybrid_jax.model import build_model
from hybrid_jax.train.optim import make_optimizer
from hybrid_jax.train.step import accumulated_grad, lm_loss, make_train_step


def _setup(pattern="SF", batch_size=8, **model):
  c = tiny_config(pattern, **model)
  c.train.batch_size = batch_size
  cfg = resolve(c)
  model = build_model(cfg.model, cfg.train.seed)
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  batch = make_source(cfg).batch(0, rows=range(batch_size))
  batch = {k: jnp.asarray(v) for k, v in batch.items()}

  def loss_fn(params, batch):
    logits = nnx.merge(graphdef, params, rest)(batch["inputs"])
    return lm_loss(logits, batch["targets"], batch["answer_mask"])
  return cfg, graphdef, params, rest, batch, loss_fn


@pytest.mark.parametrize("microbatches", [2, 4])
def test_accumulated_gradient_equals_the_whole_batch(microbatches):
  _, _, params, _, batch, loss_fn = _setup("GF")
  g1, m1 = jax.jit(lambda p, b: accumulated_grad(loss_fn, p, b, 1))(params, batch)
  gk, mk = jax.jit(lambda p, b: accumulated_grad(loss_fn, p, b, microbatches))(params, batch)
  assert float(m1["answer_loss"]) > 0       # the answer metrics are really weighted, not 0/0
  for key in ("loss", "answer_loss", "answer_acc"):
    np.testing.assert_allclose(float(mk[key]), float(m1[key]), rtol=2e-6, atol=1e-7)
  # fp32 sums in another order: an element that cancels to near zero keeps the rounding of
  # its terms, so the absolute floor follows each tensor's scale (1e-7 of it failed on an
  # AVX2 core at a 9e-6 element of a tensor whose largest is 5e-2)
  for a, b in zip(jax.tree.leaves(g1), jax.tree.leaves(gk)):
    a, b = np.asarray(a), np.asarray(b)
    np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-5 * float(np.abs(a).max()))


def test_training_with_microbatches_follows_the_plain_losses():
  def losses(microbatches, remat="none"):
    cfg, graphdef, params, rest, _, _ = _setup("SF", remat=remat)
    tx, _ = make_optimizer(cfg.train, cfg.derived.steps)
    step = make_train_step(graphdef, rest, tx, microbatches=microbatches)
    state, out, source = dict(params=params, opt_state=tx.init(params)), [], make_source(cfg)
    for s in range(6):
      batch = {k: jnp.asarray(v) for k, v in source.batch(s, rows=range(8)).items()}
      state, metrics = step(state, batch)
      out.append(float(metrics["loss"]))
    return out
  plain = losses(1)
  np.testing.assert_allclose(losses(4), plain, rtol=1e-5)
  np.testing.assert_allclose(losses(2, remat="save_dots"), plain, rtol=1e-5)
  assert plain[-1] < plain[0]


@pytest.mark.parametrize("remat", ["full", "save_dots"])
def test_remat_keeps_the_gradient(remat):
  _, _, params, _, batch, loss_fn = _setup("MF")
  _, graphdef_r, _, rest_r, _, loss_r = _setup("MF", remat=remat)
  g, m = jax.jit(jax.grad(loss_fn, has_aux=True))(params, batch)
  gr, mr = jax.jit(jax.grad(loss_r, has_aux=True))(params, batch)
  np.testing.assert_allclose(float(mr["loss"]), float(m["loss"]), rtol=1e-6)
  for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(gr)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=1e-5, atol=1e-7)


def _temp_bytes(remat, microbatches=1):
  c = tiny_config("SF", remat=remat)
  c.model.d_model, c.model.n_layers = 128, 8
  c.data.seq_len, c.data.n_pairs = 256, 8
  c.train.batch_size = 8
  cfg = resolve(c)
  model = nnx.eval_shape(lambda: build_model(cfg.model, 0))
  graphdef, params, rest = nnx.split(model, nnx.Param, ...)
  tx, _ = make_optimizer(cfg.train, 10)
  state = dict(params=params, opt_state=jax.eval_shape(tx.init, params))
  batch = dict(inputs=jax.ShapeDtypeStruct((8, 256), jnp.int32),
               targets=jax.ShapeDtypeStruct((8, 256), jnp.int32),
               answer_mask=jax.ShapeDtypeStruct((8, 256), jnp.bool_))
  step = make_train_step(graphdef, rest, tx, microbatches=microbatches)
  return step.lower(state, batch).compile().memory_analysis().temp_size_in_bytes


def test_microbatches_cut_compiled_temporary_memory():
  """(XLA:CPU barely honours remat's savings; tests/test_plan.py checks remat on TPU.)"""
  assert _temp_bytes("none", microbatches=4) < 0.5 * _temp_bytes("none")


@pytest.mark.parametrize("key,value,match", [
    ("train.microbatches", 3, "config.train.microbatches: must be an integer >= 1 dividing train.batch_size=8"),
    ("train.microbatches", 0, "config.train.microbatches"),
    ("model.remat", "some", "config.model.remat: must be one of"),
])
def test_bad_remat_or_microbatches_is_one_line(key, value, match):
  c = tiny_config()
  c.train.batch_size = 8
  section, leaf = key.split(".")
  c[section][leaf] = value
  with pytest.raises(ConfigError, match=match) as e:
    resolve(c)
  assert "\n" not in str(e.value)
