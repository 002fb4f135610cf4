"""Dense masked sliding-window attention: the oracle the faster paths are tested against.

Costs O(T^2) time and memory on purpose: it is the plainest statement of the semantics
(query i sees keys j with i - w < j <= i), not a path to train with.
"""

import jax
import jax.numpy as jnp


def band_mask(t_q: int, t_k: int, window: int) -> jax.Array:
  """Boolean [t_q, t_k] mask, True where query i may attend to key j."""
  i = jnp.arange(t_q)[:, None]
  j = jnp.arange(t_k)[None, :]
  return (j <= i) & (j > i - window)


def sliding_window_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, *, window: int, scale=None):
  """Softmax attention under an explicit band mask; GQA by repeating kv heads."""
  _, t, h, d = q_BxTxHxD.shape
  n_kv = k_BxTxKxD.shape[2]
  scale = d ** -0.5 if scale is None else scale
  group = h // n_kv
  k_BxTxHxD = jnp.repeat(k_BxTxKxD, group, axis=2)
  v_BxTxHxD = jnp.repeat(v_BxTxKxD, group, axis=2)
  s_BxHxTxT = jnp.einsum("bqhd,bkhd->bhqk", q_BxTxHxD, k_BxTxHxD,
                         preferred_element_type=jnp.float32) * scale
  s_BxHxTxT = jnp.where(band_mask(t, t, window), s_BxHxTxT, -jnp.inf)
  p_BxHxTxT = jax.nn.softmax(s_BxHxTxT, axis=-1)
  o_BxTxHxD = jnp.einsum("bhqk,bkhd->bqhd", p_BxHxTxT.astype(v_BxTxHxD.dtype), v_BxTxHxD,
                         preferred_element_type=jnp.float32)
  return o_BxTxHxD.astype(q_BxTxHxD.dtype)
