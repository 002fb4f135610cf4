"""hybrid_jax.model.linear: nnx.Linear's products and gradients, with the CPU weight
gradient in XLA:CPU's fast dot form."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from cpu_dot_forms import dots, slow_form_dots
from hybrid_jax.flax_nnx import nnx
from hybrid_jax.model.linear import linear
from pallas_kernels import dispatch


def _pair(dtype=jnp.float32):
  fast = linear(16, 24, dtype=dtype, rngs=nnx.Rngs(0))
  plain = nnx.Linear(16, 24, use_bias=False, dtype=dtype, rngs=nnx.Rngs(0))
  return fast, plain


def _grads(layer, x):
  graphdef, params = nnx.split(layer)
  def loss(params, x):
    y = nnx.merge(graphdef, params)(x)
    return jnp.sum(jnp.sin(y.astype(jnp.float32)))
  return jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(params, x)


@pytest.mark.parametrize("shape", [(32, 16), (2, 8, 16)])
def test_products_and_gradients_equal_nnx_linear(shape):
  fast, plain = _pair()
  x = jax.random.normal(jax.random.PRNGKey(1), shape)
  np.testing.assert_allclose(fast(x), plain(x), rtol=1e-6, atol=1e-6)
  for got, want in zip(jax.tree.leaves(_grads(fast, x)), jax.tree.leaves(_grads(plain, x))):
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_cpu_gradient_program_has_only_fast_form_dots():
  """nnx.Linear's own gradient program has the slow form (the weight gradient), so the
  check reads the HLO."""
  x = jax.random.normal(jax.random.PRNGKey(1), (4, 64, 16))
  def hlo(layer):
    graphdef, params = nnx.split(layer)
    grad = jax.grad(lambda p, x: jnp.sum(nnx.merge(graphdef, p)(x) ** 2), argnums=(0, 1))
    return jax.jit(grad).lower(params, x).compile().as_text()
  fast, plain = _pair()
  assert len(dots(hlo(fast))) == 3 and not slow_form_dots(hlo(fast)), slow_form_dots(hlo(fast))
  assert slow_form_dots(hlo(plain))


def test_dtype_follows_the_layer():
  fast, plain = _pair(jnp.bfloat16)
  x = jax.random.normal(jax.random.PRNGKey(1), (8, 16))
  assert fast(x).dtype == plain(x).dtype == jnp.bfloat16


@pytest.mark.parametrize("platform", ["gpu", "tpu"])
def test_plain_dot_general_for_accelerators(platform):
  fast, _ = _pair()
  x = jnp.ones((8, 16))
  with dispatch.compile_for(platform):
    jaxpr = str(jax.make_jaxpr(lambda x: fast(x))(x))
  assert "custom_vjp" not in jaxpr and "dot_general" in jaxpr
  assert "custom_vjp" in str(jax.make_jaxpr(lambda x: fast(x))(x))


def test_cpu_train_step_has_no_slow_form_dot():
  """The whole compiled CPU train step of a model with every mixer: no matmul is left in
  the form XLA:CPU runs as an Eigen contraction (the profile's blind spot, ``bench.profile``)."""
  from hybrid_jax.bench.train import make_step
  from hybrid_jax.configs.default import get_config
  from hybrid_jax.data import make_source
  from hybrid_jax.resolve import resolve
  c = get_config()
  c.model.pattern, c.model.n_layers, c.data.seq_len, c.train.batch_size = "SFMGL", 5, 64, 2
  cfg = resolve(c)
  step, state = make_step(cfg)
  hlo = step.lower(state, make_source(cfg).batch(0)).compile().as_text()
  assert len(dots(hlo)) > 50
  assert not slow_form_dots(hlo), slow_form_dots(hlo)
