"""Blockwise sliding-window attention in plain XLA: O(T * w) time and memory.

Each query block of C positions attends only to the key blocks that intersect its band:
its own block and the ceil((w - 1) / C) blocks before it. The keys of those blocks are
gathered into one [C + n*C] strip per query block, so the whole op is two batched einsums
and a masked softmax; no T x T matrix is ever formed.
"""

import math

import jax
import jax.numpy as jnp


def default_block_size(t: int, window: int) -> int:
  """A block near the window (small waste) but never tiny (matmul efficiency)."""
  block = min(max(window, 64), 512)
  return max(1, min(block, t))


def _full_causal(q, k, v, scale):
  return jax.nn.dot_product_attention(q, k, v, scale=scale, is_causal=True,
                                      implementation="xla")


def sliding_window_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, *, window: int, scale=None,
                             block_size: int | None = None):
  """Causal attention where query i sees keys i - window < j <= i; GQA supported."""
  b, t, h, d = q_BxTxHxD.shape
  n_kv = k_BxTxKxD.shape[2]
  scale = d ** -0.5 if scale is None else scale
  if window >= t:
    return _full_causal(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, scale)
  c = block_size or default_block_size(t, window)
  n_back = math.ceil((window - 1) / c)          # earlier key blocks a query block can see
  n_blocks = math.ceil(t / c)
  t_pad = n_blocks * c
  group = h // n_kv

  def blocks(x, pad_front):
    x = jnp.pad(x, ((0, 0), (pad_front, t_pad - t), (0, 0), (0, 0)))
    return x.reshape(b, -1, c, *x.shape[2:])

  q_BxNxCxKxGxD = blocks(q_BxTxHxD, 0).reshape(b, n_blocks, c, n_kv, group, d)
  k_BxMxCxKxD = blocks(k_BxTxKxD, n_back * c)     # M = n_blocks + n_back
  v_BxMxCxKxD = blocks(v_BxTxKxD, n_back * c)
  # Strip for query block n: key blocks n .. n + n_back of the front-padded sequence.
  strip = lambda x: jnp.concatenate([x[:, j:j + n_blocks] for j in range(n_back + 1)], axis=2)
  k_BxNxLxKxD = strip(k_BxMxCxKxD)
  v_BxNxLxKxD = strip(v_BxMxCxKxD)
  s_BxNxKxGxCxL = jnp.einsum("bncKgd,bnlKd->bnKgcl", q_BxNxCxKxGxD, k_BxNxLxKxD,
                             preferred_element_type=jnp.float32) * scale
  # Absolute positions: query n*c + i; key (n - n_back)*c + l.
  qpos_NxC = (jnp.arange(n_blocks)[:, None] * c + jnp.arange(c)[None, :])
  kpos_NxL = ((jnp.arange(n_blocks)[:, None] - n_back) * c
              + jnp.arange((n_back + 1) * c)[None, :])
  qpos = qpos_NxC[:, :, None]
  kpos = kpos_NxL[:, None, :]
  mask_NxCxL = (kpos <= qpos) & (kpos > qpos - window) & (kpos >= 0)
  s_BxNxKxGxCxL = jnp.where(mask_NxCxL[None, :, None, None], s_BxNxKxGxCxL, -jnp.inf)
  p_BxNxKxGxCxL = jax.nn.softmax(s_BxNxKxGxCxL, axis=-1)
  o_BxNxCxKxGxD = jnp.einsum("bnKgcl,bnlKd->bncKgd",
                             p_BxNxKxGxCxL.astype(v_BxNxLxKxD.dtype), v_BxNxLxKxD,
                             preferred_element_type=jnp.float32)
  o_BxTxHxD = o_BxNxCxKxGxD.reshape(b, t_pad, h, d)[:, :t]
  return o_BxTxHxD.astype(q_BxTxHxD.dtype)
