"""Gated DeltaNet layer (Yang, Kautz & Hatamizadeh 2024): q/k/v projections with short
convs and silu, L2-normalised q and k, beta = sigmoid, decay g = -exp(A) softplus(a + dt_bias),
the gated delta rule, then a per-head RMSNorm gated by silu(W_g x) and out_proj."""

import math

import jax
import jax.numpy as jnp

from hybrid_jax.flax_nnx import nnx
from hybrid_jax.model import registry
from hybrid_jax.model.attention import head_dim
from hybrid_jax.model.conv import ShortConv, short_conv_param_count
from hybrid_jax.model.linear import linear
from pallas_kernels.delta_rule import api as delta_api


def dims(m):
  dk = head_dim(m)
  return m.n_heads, dk, m.gdn_expand_v * dk


def param_count(m) -> int:
  h, dk, dv = dims(m)
  d = m.d_model
  return (d * h * (2 * dk + 2 * dv) + 2 * d * h        # q, k, v, gate; a, b projections
          + short_conv_param_count(h * (2 * dk + dv), m.conv_kernel, False)
          + 2 * h + dv + h * dv * d)                   # dt_bias, A_log; norm; out_proj


def state_size(m, context: int) -> int:
  h, dk, dv = dims(m)
  return h * dk * dv + (m.conv_kernel - 1) * h * (2 * dk + dv)


def l2norm(x, eps=1e-6):
  x32 = x.astype(jnp.float32)
  return (x32 * jax.lax.rsqrt(jnp.sum(x32 * x32, -1, keepdims=True) + eps)).astype(x.dtype)


class GatedDeltaNet(nnx.Module):
  def __init__(self, m, rngs: nnx.Rngs):
    h, dk, dv = dims(m)
    dtype = jnp.dtype(m.dtype)
    lin = lambda o: linear(m.d_model, o, dtype=dtype, rngs=rngs)
    self.n_heads, self.dk, self.dv = h, dk, dv
    self.impl, self.chunk = m.recurrent_impl, m.chunk_size
    self.qkv_proj = lin(h * (2 * dk + dv))
    self.conv = ShortConv(h * (2 * dk + dv), m.conv_kernel, bias=False, rngs=rngs)
    self.a_proj, self.b_proj, self.g_proj = lin(h), lin(h), lin(h * dv)
    dt = jnp.exp(jax.random.uniform(rngs.params(), (h,)) * (math.log(0.1) - math.log(1e-3))
                 + math.log(1e-3))
    self.dt_bias = nnx.Param(dt + jnp.log(-jnp.expm1(-dt)))
    self.A_log = nnx.Param(jnp.log(jax.random.uniform(rngs.params(), (h,), minval=1.0, maxval=16.0)))
    self.norm = nnx.RMSNorm(dv, epsilon=m.norm_eps, dtype=dtype, rngs=rngs)
    self.out_proj = linear(h * dv, m.d_model, dtype=dtype, rngs=rngs)

  def _inputs(self, x_BxTxD, qkv):
    b, t, _ = x_BxTxD.shape
    h, dk, dv = self.n_heads, self.dk, self.dv
    qkv = jax.nn.silu(qkv)
    q = l2norm(qkv[..., :h * dk].reshape(b, t, h, dk))
    k = l2norm(qkv[..., h * dk:2 * h * dk].reshape(b, t, h, dk))
    v = qkv[..., 2 * h * dk:].reshape(b, t, h, dv)
    beta = jax.nn.sigmoid(self.b_proj(x_BxTxD).astype(jnp.float32))
    g = -jnp.exp(self.A_log[...]) * jax.nn.softplus(
        self.a_proj(x_BxTxD).astype(jnp.float32) + self.dt_bias[...])
    return q, k, v, g, beta

  def _finish(self, x_BxTxD, o):
    b, t = o.shape[:2]
    gate = self.g_proj(x_BxTxD).reshape(b, t, self.n_heads, self.dv)
    o = self.norm(o) * jax.nn.silu(gate)
    return self.out_proj(o.reshape(b, t, self.n_heads * self.dv))

  def __call__(self, x_BxTxD):
    q, k, v, g, beta = self._inputs(x_BxTxD, self.conv(self.qkv_proj(x_BxTxD)))
    o, _ = delta_api.gated_delta_rule(q, k, v, g, beta, implementation=self.impl,
                                      chunk_size=self.chunk)
    return self._finish(x_BxTxD, o)

  def init_cache(self, batch: int, max_len: int):
    del max_len
    return dict(conv=self.conv.init_cache(batch, self.n_heads * (2 * self.dk + self.dv)),
                state=jnp.zeros((batch, self.n_heads, self.dk, self.dv), jnp.float32))

  def step(self, x_Bx1xD, cache, pos):
    del pos
    qkv, conv = self.conv.step(self.qkv_proj(x_Bx1xD), cache["conv"])
    q, k, v, g, beta = self._inputs(x_Bx1xD, qkv)
    o, state = delta_api.gated_delta_rule(q, k, v, g, beta, initial_state=cache["state"],
                                          implementation=self.impl)
    return self._finish(x_Bx1xD, o), dict(conv=conv, state=state)


registry.register("G", "Gated DeltaNet", "recurrent", param_count, state_size)(GatedDeltaNet)
