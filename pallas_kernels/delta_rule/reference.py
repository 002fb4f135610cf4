"""Per-token gated delta rule, the oracle (a ``lax.scan`` over time). With the state
S [K, V] (flash-linear-attention's convention):

  S_t = exp(g_t) (I - beta_t k_t k_t^T) S_{t-1} + beta_t k_t v_t^T,   o_t = scale * q_t S_t

which is the issue's S_t = exp(g_t) S_{t-1} (I - beta_t k_t k_t^T) + beta_t v_t k_t^T with
S stored transposed.
"""

import jax
import jax.numpy as jnp


def gated_delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None):
  b, t, h, dk = q.shape
  dv = v.shape[-1]
  scale = dk ** -0.5 if scale is None else scale
  s0 = jnp.zeros((b, h, dk, dv), jnp.float32) if initial_state is None else initial_state.astype(jnp.float32)

  def step(s_BxHxKxV, x):
    q_t, k_t, v_t, g_t, beta_t = x
    s_BxHxKxV = jnp.exp(g_t)[..., None, None] * s_BxHxKxV
    u_BxHxV = beta_t[..., None] * (v_t - jnp.einsum("bhk,bhkv->bhv", k_t, s_BxHxKxV))
    s_BxHxKxV = s_BxHxKxV + k_t[..., :, None] * u_BxHxV[..., None, :]
    return s_BxHxKxV, scale * jnp.einsum("bhk,bhkv->bhv", q_t, s_BxHxKxV)

  xs = tuple(jnp.moveaxis(x.astype(jnp.float32), 1, 0) for x in (q, k, v, g, beta))
  s_final, o_TxBxHxV = jax.lax.scan(step, s0, xs)
  return jnp.moveaxis(o_TxBxHxV, 0, 1).astype(q.dtype), s_final
