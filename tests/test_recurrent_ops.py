"""Chunked simple GLA and gated delta rule against their per-token references:
outputs, final states and every gradient."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from pallas_kernels.delta_rule import api as delta_api
from pallas_kernels.linear_scan import api as scan_api


def _inputs(t, decay, seed=0, b=2, h=3, dk=8, dv=6):
  ks = jax.random.split(jax.random.PRNGKey(seed), 6)
  q = jax.random.normal(ks[0], (b, t, h, dk))
  k = jax.random.normal(ks[1], (b, t, h, dk))
  k = k / jnp.linalg.norm(k, axis=-1, keepdims=True)     # delta rule: unit keys, as in GDN
  v = jax.random.normal(ks[2], (b, t, h, dv))
  scale = {"strong": 3.0, "weak": 0.02}[decay]
  g = -scale * jax.nn.sigmoid(jax.random.normal(ks[3], (b, t, h)))
  beta = jax.nn.sigmoid(jax.random.normal(ks[4], (b, t, h)))
  s0 = jax.random.normal(ks[5], (b, h, dk, dv))
  return q, k, v, g, beta, s0


def _close(a, b, rel):
  a, b = np.asarray(a), np.asarray(b)
  assert np.max(np.abs(a - b)) <= rel * max(np.max(np.abs(b)), 1e-6), np.max(np.abs(a - b))


CASES = [(1, "weak", False), (37, "strong", True), (37, "weak", False), (64, "weak", True),
         (24, "strong", False)]


def _ops(name, chunk):
  if name == "simple_gla":
    run = lambda impl, q, k, v, g, beta, s0: scan_api.simple_gla(
        q, k, v, g, initial_state=s0, implementation=impl, chunk_size=chunk)
  else:
    run = lambda impl, q, k, v, g, beta, s0: delta_api.gated_delta_rule(
        q, k, v, g, beta, initial_state=s0, implementation=impl, chunk_size=chunk)
  return run


@pytest.mark.parametrize("op", ["simple_gla", "gated_delta_rule"])
@pytest.mark.parametrize("t,decay,with_state", CASES)
def test_chunked_equals_per_token_reference(op, t, decay, with_state):
  q, k, v, g, beta, s0 = _inputs(t, decay)
  s0 = s0 if with_state else None
  run = _ops(op, chunk=8)
  ref = jax.jit(lambda *a: run("reference", *a))
  chunked = jax.jit(lambda *a: run("xla", *a))
  o_ref, s_ref = ref(q, k, v, g, beta, s0)
  o, s = chunked(q, k, v, g, beta, s0)
  _close(o, o_ref, 1e-5)
  _close(s, s_ref, 1e-5)

  w_o = jax.random.normal(jax.random.PRNGKey(7), o.shape)
  w_s = jax.random.normal(jax.random.PRNGKey(8), s.shape)
  argnums = (0, 1, 2, 3, 4, 5) if with_state else (0, 1, 2, 3, 4)

  def loss(impl, *a):
    o, s = run(impl, *a)
    return jnp.sum(o * w_o) + jnp.sum(s * w_s)
  grads = lambda impl: jax.jit(jax.grad(lambda *a: loss(impl, *a), argnums=argnums))(
      q, k, v, g, beta, s0)
  for name, g_c, g_r in zip("q k v g beta s0".split(), grads("xla"), grads("reference")):
    if op == "simple_gla" and name == "beta":
      continue   # simple GLA has no beta
    _close(g_c, g_r, 5e-5)


def test_chunk_size_does_not_change_the_result():
  q, k, v, g, beta, _ = _inputs(40, "weak")
  a = delta_api.gated_delta_rule(q, k, v, g, beta, chunk_size=4)[0]
  b = delta_api.gated_delta_rule(q, k, v, g, beta, chunk_size=16)[0]
  _close(a, b, 1e-5)


def test_state_carries_across_calls_exactly_as_one_call():
  """Splitting a sequence and passing the final state on equals one pass (decoding relies on it)."""
  q, k, v, g, beta, _ = _inputs(30, "weak")
  full_o, full_s = scan_api.simple_gla(q, k, v, g, chunk_size=8)
  o1, s1 = scan_api.simple_gla(q[:, :13], k[:, :13], v[:, :13], g[:, :13], chunk_size=8)
  o2, s2 = scan_api.simple_gla(q[:, 13:], k[:, 13:], v[:, 13:], g[:, 13:], initial_state=s1,
                               chunk_size=8)
  _close(jnp.concatenate([o1, o2], 1), full_o, 1e-5)
  _close(s2, full_s, 1e-5)


def test_default_scale_is_inverse_sqrt_key_dim():
  q, k, v, g, beta, _ = _inputs(9, "weak")
  a = delta_api.gated_delta_rule(q, k, v, g, beta)[0]
  b = delta_api.gated_delta_rule(q, k, v, g, beta, scale=8 ** -0.5)[0]
  c = delta_api.gated_delta_rule(q, k, v, g, beta, scale=1.0)[0]
  _close(a, b, 1e-6)
  assert not np.allclose(a, c)


@pytest.mark.parametrize("bad", ["g", "state", "impl"])
def test_bad_arguments_are_rejected(bad):
  q, k, v, g, beta, s0 = _inputs(5, "weak")
  kwargs = {}
  if bad == "g":
    g = g[..., :1]
  elif bad == "state":
    kwargs["initial_state"] = s0[:, :1]
  else:
    kwargs["implementation"] = "magic"
  with pytest.raises(ValueError):
    scan_api.simple_gla(q, k, v, g, **kwargs)


def test_unit_lower_inverse_vjp_matches_autodiff_of_the_loop_and_keeps_only_the_inverse():
  """The delta rule's (I + A)^-1 has a hand VJP (-T^T T-bar T^T on the strict lower
  triangle): it must equal JAX's derivative of the forward-substitution loop, and its
  residual must be T alone, not the loop's C carries."""
  from pallas_kernels.delta_rule import xla as delta_xla
  c = 16
  ks = jax.random.split(jax.random.PRNGKey(7), 2)
  a = jnp.tril(0.3 * jax.random.normal(ks[0], (2, 3, c, c)), -1)
  t_bar = jax.random.normal(ks[1], (2, 3, c, c))
  t, vjp = jax.vjp(delta_xla.unit_lower_inverse, a)
  t_ref, vjp_ref = jax.vjp(delta_xla._forward_substitution, a)
  np.testing.assert_allclose(t, np.linalg.inv(np.eye(c) + np.asarray(a)), rtol=1e-5, atol=1e-5)
  (a_bar,), (a_bar_ref,) = vjp(t_bar), vjp_ref(t_bar)
  _close(a_bar, jnp.tril(a_bar_ref, -1), 1e-5)
  assert not np.any(np.triu(np.asarray(a_bar)))            # only A's support gets a cotangent
  saved = sum(np.size(x) for x in jax.tree.leaves(
      jax.vjp(delta_xla.unit_lower_inverse, a)[1]))
  saved_loop = sum(np.size(x) for x in jax.tree.leaves(
      jax.vjp(delta_xla._forward_substitution, a)[1]))
  assert saved <= 2 * a.size < saved_loop


@pytest.mark.parametrize("op", ["simple_gla", "gated_delta_rule"])
def test_cpu_gradient_matmuls_take_the_fast_form(op):
  """Every matmul of the compiled CPU gradient program, the scan's and the WY factors', contracts
  its left operand's last axis (``pallas_kernels.cpu_matmul``): written as einsums over
  [B, C, H, K] chunks, nine of the delta rule's 27 dots and five of simple GLA's 12 were
  contractions over a leading axis, which XLA:CPU runs as batched Eigen contractions."""
  from cpu_dot_forms import dots, slow_form_dots
  q, k, v, g, beta, s0 = _inputs(64, "weak")
  run = _ops(op, chunk=16)
  hlo = jax.jit(jax.grad(lambda *a: jnp.sum(run("xla", *a)[0] ** 2), argnums=(0, 1, 2, 3, 5))
                ).lower(q, k, v, g, beta, s0).compile().as_text()
  assert len(dots(hlo)) >= 10, hlo
  assert not slow_form_dots(hlo), slow_form_dots(hlo)
