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
  """Half the window: each query block then reads a key strip of ~1.5 w (w = block gives
  2 w), while blocks stay large enough for efficient matmuls."""
  block = min(max(window // 2, 32), 256)
  return max(1, min(block, t))


def _grouped(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD):
  """Kv-group-major layouts: q [B, K, T, G, D], k and v [B, K, T, D]. With T ahead of the
  group axis, a block of queries and its heads form one contiguous matmul operand, so the
  score and value einsums need no transposes inside (XLA:CPU's batched matmuls are slow
  on strided operands)."""
  b, t, h, d = q_BxTxHxD.shape
  n_kv = k_BxTxKxD.shape[2]
  q_BxKxTxGxD = q_BxTxHxD.reshape(b, t, n_kv, h // n_kv, d).transpose(0, 2, 1, 3, 4)
  return q_BxKxTxGxD, k_BxTxKxD.transpose(0, 2, 1, 3), v_BxTxKxD.transpose(0, 2, 1, 3)


def _ungrouped(o_BxKxTxGxD):
  b, n_kv, t, g, d = o_BxKxTxGxD.shape
  return o_BxKxTxGxD.transpose(0, 2, 1, 3, 4).reshape(b, t, n_kv * g, d)


def _softmax_attend(q_QxGxD, k_LxD, v_LxD, mask_QxL, scale, out_dtype):
  """Masked softmax attention over leading batch axes: q [..., Q, G, D], k/v [..., L, D]."""
  s = jnp.einsum("...qgd,...ld->...qgl", q_QxGxD, k_LxD, preferred_element_type=jnp.float32)
  s = jnp.where(mask_QxL[..., :, None, :], s * scale, -jnp.inf)
  p = jax.nn.softmax(s, axis=-1)
  o = jnp.einsum("...qgl,...ld->...qgd", p.astype(v_LxD.dtype), v_LxD,
                 preferred_element_type=jnp.float32)
  return o.astype(out_dtype)


def full_causal_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, *, scale=None):
  """Dense causal attention (the w >= T case) in the same grouped layout."""
  t, d = q_BxTxHxD.shape[1], q_BxTxHxD.shape[3]
  scale = d ** -0.5 if scale is None else scale
  q, k, v = _grouped(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD)
  causal_TxT = jnp.arange(t)[None, :] <= jnp.arange(t)[:, None]
  return _ungrouped(_softmax_attend(q, k, v, causal_TxT, scale, q_BxTxHxD.dtype))


def sliding_window_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, *, window: int, scale=None,
                             block_size: int | None = None):
  """Causal attention where query i sees keys i - window < j <= i; GQA supported."""
  b, t, h, d = q_BxTxHxD.shape
  n_kv = k_BxTxKxD.shape[2]
  scale = d ** -0.5 if scale is None else scale
  if window >= t:
    return full_causal_attention(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD, scale=scale)
  c = block_size or default_block_size(t, window)
  n_back = math.ceil((window - 1) / c)          # earlier key blocks a query block can see
  n_blocks = math.ceil(t / c)
  t_pad = n_blocks * c
  g = h // n_kv
  q_BxKxTxGxD, k_BxKxTxD, v_BxKxTxD = _grouped(q_BxTxHxD, k_BxTxKxD, v_BxTxKxD)
  pad = lambda x, front: jnp.pad(x, ((0, 0), (0, 0), (front, t_pad - t)) + ((0, 0),) * (x.ndim - 3))
  q_BxKxNxCxGxD = pad(q_BxKxTxGxD, 0).reshape(b, n_kv, n_blocks, c, g, d)
  k_BxKxMxCxD = pad(k_BxKxTxD, n_back * c).reshape(b, n_kv, n_blocks + n_back, c, d)
  v_BxKxMxCxD = pad(v_BxKxTxD, n_back * c).reshape(b, n_kv, n_blocks + n_back, c, d)
  # Strip of query block n: key blocks n .. n + n_back of the front-padded keys.
  strip = lambda x: jnp.concatenate([x[:, :, j:j + n_blocks] for j in range(n_back + 1)], axis=3)
  k_BxKxNxLxD, v_BxKxNxLxD = strip(k_BxKxMxCxD), strip(v_BxKxMxCxD)
  # Absolute positions: query n*c + i; key (n - n_back)*c + l.
  qpos = (jnp.arange(n_blocks)[:, None] * c + jnp.arange(c)[None, :])[:, :, None]
  kpos = ((jnp.arange(n_blocks)[:, None] - n_back) * c + jnp.arange((n_back + 1) * c)[None, :])[:, None, :]
  mask_NxCxL = (kpos <= qpos) & (kpos > qpos - window) & (kpos >= 0)
  o_BxKxNxCxGxD = _softmax_attend(q_BxKxNxCxGxD, k_BxKxNxLxD, v_BxKxNxLxD, mask_NxCxL, scale,
                                  q_BxTxHxD.dtype)
  return _ungrouped(o_BxKxNxCxGxD.reshape(b, n_kv, t_pad, g, d)[:, :, :t])
