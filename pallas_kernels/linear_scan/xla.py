"""Chunked simple GLA in plain XLA: matmuls inside a chunk, state passed between chunks.

Within a chunk with cumulative log decay b_t (b_t = sum of g up to t in the chunk):
  o_t = scale * (exp(b_t) q_t S_0 + sum_{s<=t} exp(b_t - b_s) (q_t . k_s) v_s)
  S_C = exp(b_C) S_0 + sum_s exp(b_C - b_s) k_s v_s^T
Every exponent is of a non-positive number, so nothing overflows. Cost O(T C (K + V))
for the intra-chunk part and O(T K V) for the state: linear in T.
"""

import jax
import jax.numpy as jnp

from pallas_kernels import cpu_matmul as mm

DEFAULT_CHUNK = 64


def chunk_inputs(x_BxTx, chunk, pad_value=0.0):
  """[B, T, ...] -> [N, B, C, ...], padded at the end (padding must be state-neutral)."""
  b, t = x_BxTx.shape[:2]
  n = -(-t // chunk)
  x = jnp.pad(x_BxTx, ((0, 0), (0, n * chunk - t)) + ((0, 0),) * (x_BxTx.ndim - 2),
              constant_values=pad_value)
  return jnp.moveaxis(x.reshape(b, n, chunk, *x_BxTx.shape[2:]), 1, 0)


def unchunk(x_NxBxCx, t):
  n, b, c = x_NxBxCx.shape[:3]
  return jnp.moveaxis(x_NxBxCx, 0, 1).reshape(b, n * c, *x_NxBxCx.shape[3:])[:, :t]


def simple_gla(q, k, v, g, *, scale=None, initial_state=None, chunk_size=DEFAULT_CHUNK):
  """Heads before positions inside each chunk ([N, B, H, C, ...]), so that every matmul,
  forward and backward, is a plain batched one in the form XLA:CPU's fast dot kernel takes
  (``cpu_matmul``; whole two-thread toy steps of an M or L hybrid compiled in the timing
  process: 1.05-1.09x; the bench has no recurrent shape to time it in cache-loaded workers)."""
  b, t, h, dk = q.shape
  dv = v.shape[-1]
  scale = dk ** -0.5 if scale is None else scale
  c = max(1, min(chunk_size, t))
  heads_first = lambda x: jnp.moveaxis(chunk_inputs(x.astype(jnp.float32), c), 3, 2)
  q_N, k_N, v_N, g_N = (heads_first(x) for x in (q, k, v, g))   # padding: k=v=0, g=0
  causal_CxC = jnp.tril(jnp.ones((c, c), bool))
  s0 = (jnp.zeros((b, h, dk, dv), jnp.float32) if initial_state is None
        else initial_state.astype(jnp.float32))

  def chunk_step(s_BxHxKxV, x):
    q_BxHxCxK, k_BxHxCxK, v_BxHxCxV, g_BxHxC = x
    b_BxHxC = jnp.cumsum(g_BxHxC, axis=-1)
    diff_BxHxCxC = b_BxHxC[..., :, None] - b_BxHxC[..., None, :]
    decay_BxHxCxC = jnp.exp(jnp.where(causal_CxC, diff_BxHxCxC, -jnp.inf))
    scores_BxHxCxC = mm.matmul_nt(q_BxHxCxK, k_BxHxCxK) * decay_BxHxCxC
    o_intra = mm.matmul(scores_BxHxCxC, v_BxHxCxV)
    o_inter = mm.matmul(q_BxHxCxK * jnp.exp(b_BxHxC)[..., None], s_BxHxKxV)
    b_last_BxH = b_BxHxC[..., -1]
    k_decayed = k_BxHxCxK * jnp.exp(b_last_BxH[..., None] - b_BxHxC)[..., None]
    s_new = (jnp.exp(b_last_BxH)[..., None, None] * s_BxHxKxV
             + mm.matmul_tn(k_decayed, v_BxHxCxV))
    return s_new, scale * (o_intra + o_inter)

  s_final, o_N = jax.lax.scan(chunk_step, s0, (q_N, k_N, v_N, g_N))
  return unchunk(jnp.moveaxis(o_N, 2, 3), t).astype(q.dtype), s_final
