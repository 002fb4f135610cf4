"""Per-token recurrence of simple GLA, the oracle (a ``lax.scan`` over time):

  S_t = exp(g_t) S_{t-1} + k_t v_t^T,   o_t = scale * q_t S_t

q, k [B, T, H, K]; v [B, T, H, V]; g [B, T, H] (log decay); state [B, H, K, V].
"""

import jax
import jax.numpy as jnp


def simple_gla(q, k, v, g, *, scale=None, initial_state=None):
  b, t, h, dk = q.shape
  dv = v.shape[-1]
  scale = dk ** -0.5 if scale is None else scale
  s0 = jnp.zeros((b, h, dk, dv), jnp.float32) if initial_state is None else initial_state.astype(jnp.float32)

  def step(s_BxHxKxV, x):
    q_t, k_t, v_t, g_t = x
    s_BxHxKxV = (jnp.exp(g_t)[..., None, None] * s_BxHxKxV
                 + k_t[..., :, None] * v_t[..., None, :])
    o_t = scale * jnp.einsum("bhk,bhkv->bhv", q_t, s_BxHxKxV)
    return s_BxHxKxV, o_t

  xs = tuple(jnp.moveaxis(x.astype(jnp.float32), 1, 0) for x in (q, k, v, g))
  s_final, o_TxBxHxV = jax.lax.scan(step, s0, xs)
  return jnp.moveaxis(o_TxBxHxV, 0, 1).astype(q.dtype), s_final
