"""Mamba-2 block (Dao & Gu 2024): in_proj -> short causal conv on (x, B, C) -> SSD with
per-head dt and A -> D skip -> gated RMSNorm with silu(z) -> out_proj. One B/C group.

SSD is simple GLA with q = C, k = B, v = x * dt and log decay g = dt * A (A < 0), scale 1.
"""

import math

import jax
import jax.numpy as jnp

from hybrid_jax.flax_nnx import nnx
from hybrid_jax.model import registry
from hybrid_jax.model.conv import ShortConv, short_conv_param_count
from hybrid_jax.model.linear import linear
from pallas_kernels.linear_scan import api as scan_api


def dims(m):
  d_inner = m.ssm_expand * m.d_model
  return d_inner, d_inner // m.ssm_head_dim, m.ssm_state   # d_inner, heads, N


def param_count(m) -> int:
  d_inner, h, n = dims(m)
  conv_ch = d_inner + 2 * n
  return (m.d_model * (2 * d_inner + 2 * n + h) + short_conv_param_count(conv_ch, m.conv_kernel, True)
          + 3 * h + d_inner + d_inner * m.d_model)     # dt_bias, A_log, D; norm; out_proj


def state_size(m, context: int) -> int:
  d_inner, h, n = dims(m)
  return h * m.ssm_head_dim * n + (m.conv_kernel - 1) * (d_inner + 2 * n)


class Mamba2(nnx.Module):
  def __init__(self, m, rngs: nnx.Rngs):
    d_inner, h, n = dims(m)
    dtype = jnp.dtype(m.dtype)
    self.d_inner, self.n_heads, self.head_dim, self.d_state = d_inner, h, m.ssm_head_dim, n
    self.impl, self.chunk = m.recurrent_impl, m.chunk_size
    self.in_proj = linear(m.d_model, 2 * d_inner + 2 * n + h, dtype=dtype, rngs=rngs)
    self.conv = ShortConv(d_inner + 2 * n, m.conv_kernel, bias=True, rngs=rngs)
    # dt initialised log-uniform in [1e-3, 1e-1] (through the inverse softplus), A in [1, 16].
    dt = jnp.exp(jax.random.uniform(rngs.params(), (h,)) * (math.log(0.1) - math.log(1e-3))
                 + math.log(1e-3))
    self.dt_bias = nnx.Param(dt + jnp.log(-jnp.expm1(-dt)))
    self.A_log = nnx.Param(jnp.log(jax.random.uniform(rngs.params(), (h,), minval=1.0, maxval=16.0)))
    self.D = nnx.Param(jnp.ones((h,)))
    self.norm = nnx.RMSNorm(d_inner, epsilon=m.norm_eps, dtype=dtype, rngs=rngs)
    self.out_proj = linear(d_inner, m.d_model, dtype=dtype, rngs=rngs)

  def _split(self, zxbcdt):
    di, n = self.d_inner, self.d_state
    return zxbcdt[..., :di], zxbcdt[..., di:2 * di + 2 * n], zxbcdt[..., 2 * di + 2 * n:]

  def _ssd_inputs(self, xbc, dt_raw):
    b, t, _ = xbc.shape
    di, n, h, p = self.d_inner, self.d_state, self.n_heads, self.head_dim
    xbc = jax.nn.silu(xbc)
    x = xbc[..., :di].reshape(b, t, h, p)
    bm = jnp.broadcast_to(xbc[..., di:di + n][:, :, None], (b, t, h, n))
    cm = jnp.broadcast_to(xbc[..., di + n:][:, :, None], (b, t, h, n))
    dt = jax.nn.softplus(dt_raw.astype(jnp.float32) + self.dt_bias[...])        # [B, T, H]
    g = -jnp.exp(self.A_log[...]) * dt
    return x, bm, cm, dt, g

  def _finish(self, y, x, z):
    b, t = x.shape[:2]
    y = y + self.D[...][:, None].astype(y.dtype) * x
    y = self.norm(y.reshape(b, t, self.d_inner) * jax.nn.silu(z))
    return self.out_proj(y)

  def __call__(self, x_BxTxD):
    z, xbc, dt_raw = self._split(self.in_proj(x_BxTxD))
    x, bm, cm, dt, g = self._ssd_inputs(self.conv(xbc), dt_raw)
    y, _ = scan_api.simple_gla(cm, bm, x * dt[..., None].astype(x.dtype), g, scale=1.0,
                               implementation=self.impl, chunk_size=self.chunk)
    return self._finish(y, x, z)

  def init_cache(self, batch: int, max_len: int):
    del max_len   # constant-size state
    return dict(conv=self.conv.init_cache(batch, self.d_inner + 2 * self.d_state),
                ssm=jnp.zeros((batch, self.n_heads, self.d_state, self.head_dim), jnp.float32))

  def step(self, x_Bx1xD, cache, pos):
    del pos
    z, xbc, dt_raw = self._split(self.in_proj(x_Bx1xD))
    xbc, conv = self.conv.step(xbc, cache["conv"])
    x, bm, cm, dt, g = self._ssd_inputs(xbc, dt_raw)
    y, ssm = scan_api.simple_gla(cm, bm, x * dt[..., None].astype(x.dtype), g, scale=1.0,
                                 initial_state=cache["ssm"], implementation=self.impl)
    return self._finish(y, x, z), dict(conv=conv, ssm=ssm)


registry.register("M", "Mamba-2", "recurrent", param_count, state_size)(Mamba2)
