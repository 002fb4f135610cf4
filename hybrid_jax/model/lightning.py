"""Lightning attention layer (Qin et al. 2024; MiniMax-01): linear attention on silu
features with a fixed, per-head exponential decay, then RMSNorm gated by sigmoid(W_g x).

Head h decays by exp(-2^(-8 (h+1) / H)) per token (ALiBi-style slopes): from fast-forgetting
to nearly lossless heads. The decays are constants, not parameters.
"""

import jax
import jax.numpy as jnp

from hybrid_jax.flax_nnx import nnx
from hybrid_jax.model import registry
from hybrid_jax.model.attention import head_dim
from hybrid_jax.model.linear import linear
from pallas_kernels.linear_scan import api as scan_api


def param_count(m) -> int:
  inner = m.n_heads * head_dim(m)
  return 5 * m.d_model * inner + head_dim(m)           # q, k, v, gate, out; norm


def state_size(m, context: int) -> int:
  return m.n_heads * head_dim(m) ** 2


def head_log_decays(n_heads: int):
  return -(2.0 ** (-8.0 * (jnp.arange(n_heads) + 1) / n_heads))


class Lightning(nnx.Module):
  def __init__(self, m, rngs: nnx.Rngs):
    dtype = jnp.dtype(m.dtype)
    self.n_heads, self.dh = m.n_heads, head_dim(m)
    self.impl, self.chunk = m.recurrent_impl, m.chunk_size
    inner = self.n_heads * self.dh
    lin = lambda i, o: linear(i, o, dtype=dtype, rngs=rngs)
    self.qkv_proj = lin(m.d_model, 3 * inner)
    self.g_proj = lin(m.d_model, inner)
    self.norm = nnx.RMSNorm(self.dh, epsilon=m.norm_eps, dtype=dtype, rngs=rngs)
    self.out_proj = lin(inner, m.d_model)

  def _inputs(self, x_BxTxD):
    b, t, _ = x_BxTxD.shape
    q, k, v = jnp.split(jax.nn.silu(self.qkv_proj(x_BxTxD)), 3, axis=-1)
    shape = (b, t, self.n_heads, self.dh)
    g = jnp.broadcast_to(head_log_decays(self.n_heads), (b, t, self.n_heads))
    return q.reshape(shape), k.reshape(shape), v.reshape(shape), g

  def _finish(self, x_BxTxD, o):
    b, t = o.shape[:2]
    o = self.norm(o).reshape(b, t, -1) * jax.nn.sigmoid(self.g_proj(x_BxTxD))
    return self.out_proj(o)

  def __call__(self, x_BxTxD):
    q, k, v, g = self._inputs(x_BxTxD)
    o, _ = scan_api.simple_gla(q, k, v, g, implementation=self.impl, chunk_size=self.chunk)
    return self._finish(x_BxTxD, o)

  def init_cache(self, batch: int, max_len: int):
    del max_len
    return dict(state=jnp.zeros((batch, self.n_heads, self.dh, self.dh), jnp.float32))

  def step(self, x_Bx1xD, cache, pos):
    del pos
    q, k, v, g = self._inputs(x_Bx1xD)
    o, state = scan_api.simple_gla(q, k, v, g, initial_state=cache["state"],
                                   implementation=self.impl)
    return self._finish(x_Bx1xD, o), dict(state=state)


registry.register("L", "Lightning attention", "recurrent", param_count, state_size)(Lightning)
