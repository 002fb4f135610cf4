"""Chunked gated delta rule in plain XLA, in the WY/UT form.

Inside a chunk with cumulative decay G_t = exp(b_t), the delta-rule updates
u_t = beta_t (v_t - exp(g_t) S_{t-1}^T k_t) satisfy the unit lower-triangular system
  (I + A) U = diag(beta) V - diag(beta G) K S_0,   A_ts = beta_t exp(b_t - b_s) k_t . k_s (s < t)
so U = U~ - W S_0 with U~ = T diag(beta) V and W = T diag(beta G) K, T = (I + A)^-1
(forward substitution per chunk, independent of the state). Then
  o_t = scale * (G_t q_t S_0 + sum_{s<=t} exp(b_t - b_s) (q_t . k_s) u_s)
  S_C = G_C S_0 + sum_s exp(b_C - b_s) k_s u_s^T
and only the last two lines run sequentially over chunks. Every matmul goes through
``cpu_matmul``, so that on CPU its forward and backward dots take XLA:CPU's fast form.
"""

import jax
import jax.numpy as jnp

from pallas_kernels import cpu_matmul as mm
from pallas_kernels.linear_scan.xla import chunk_inputs, unchunk

DEFAULT_CHUNK = 64


def _forward_substitution(a_xCxC):
  """(I + A)^-1 for strictly lower-triangular A, one row at a time:
  row i = e_i - A[i] (I + A)^-1 (only rows < i of the inverse are needed, and set).

  Plain matmuls in a loop rather than jax.scipy's solve_triangular: with it, the
  forward+backward of this op hung intermittently on XLA:CPU (jax 0.10; 2 of 3 runs at
  B=4, T=1024); with this loop it never did."""
  c = a_xCxC.shape[-1]
  eye = jnp.eye(c, dtype=a_xCxC.dtype)

  def row(i, t_xCxC):
    new_row = eye[i] - jnp.einsum("...j,...jk->...k", a_xCxC[..., i, :], t_xCxC)
    return t_xCxC.at[..., i, :].set(new_row)

  return jax.lax.fori_loop(0, c, row, jnp.zeros_like(a_xCxC))


@jax.custom_vjp
def unit_lower_inverse(a_xCxC):
  """T = (I + A)^-1 for strictly lower-triangular A (``_forward_substitution``).

  Its own VJP: differentiating the loop would save all C of its carries (a [C, ..., C, C]
  residual, most of the delta rule's gradient memory); from dT = -T dA T the cotangent is
  A-bar = -T^T T-bar T^T, masked to the strict lower triangle (A's support), and only T is
  kept."""
  return _forward_substitution(a_xCxC)


def _inverse_fwd(a_xCxC):
  t_xCxC = _forward_substitution(a_xCxC)
  return t_xCxC, t_xCxC


def _inverse_bwd(t_xCxC, t_bar_xCxC):
  a_bar = -mm.matmul_nt(mm.matmul_tn(t_xCxC, t_bar_xCxC), t_xCxC)       # T^T T-bar T^T
  return (jnp.tril(a_bar, -1),)


unit_lower_inverse.defvjp(_inverse_fwd, _inverse_bwd)


def wy_factors(q, k, v, g, beta, c, inverse=unit_lower_inverse):
  """The state-independent per-chunk factors, [N, B, H, C, ...] float32, T padded to a multiple
  of c with k = v = beta = 0, g = 0 (which leaves the state unchanged):
  (u~, W, q k^T decay (causal), q decay, k decay, log decay of the whole chunk)."""
  q_N, k_N, v_N = (jnp.moveaxis(chunk_inputs(x.astype(jnp.float32), c), 3, 2) for x in (q, k, v))
  g_N, beta_N = (jnp.moveaxis(chunk_inputs(x.astype(jnp.float32), c), 3, 2) for x in (g, beta))
  causal = jnp.tril(jnp.ones((c, c), bool))
  strict = jnp.tril(jnp.ones((c, c), bool), -1)
  b_N = jnp.cumsum(g_N, axis=-1)                                       # [N, B, H, C]
  diff = b_N[..., :, None] - b_N[..., None, :]
  kk = mm.matmul_nt(k_N, k_N)
  a_N = jnp.where(strict, beta_N[..., None] * jnp.exp(jnp.where(strict, diff, 0.0)) * kk, 0.0)
  t_N = inverse(a_N)                                                   # (I + A)^-1
  u_tilde_N = mm.matmul(t_N, beta_N[..., None] * v_N)                  # [N, B, H, C, V]
  w_N = mm.matmul(t_N, (beta_N * jnp.exp(b_N))[..., None] * k_N)       # [N, B, H, C, K]
  qk_decay_N = (mm.matmul_nt(q_N, k_N)
                * jnp.exp(jnp.where(causal, diff, -jnp.inf)))
  q_decay_N = q_N * jnp.exp(b_N)[..., None]
  k_decay_N = k_N * jnp.exp(b_N[..., -1:] - b_N)[..., None]
  return u_tilde_N, w_N, qk_decay_N, q_decay_N, k_decay_N, b_N[..., -1]


def gated_delta_rule(q, k, v, g, beta, *, scale=None, initial_state=None,
                     chunk_size=DEFAULT_CHUNK):
  b, t, h, dk = q.shape
  dv = v.shape[-1]
  scale = dk ** -0.5 if scale is None else scale
  c = max(1, min(chunk_size, t))
  # State-independent, parallel over all chunks: the WY factors.
  factors = wy_factors(q, k, v, g, beta, c)

  s0 = (jnp.zeros((b, h, dk, dv), jnp.float32) if initial_state is None
        else initial_state.astype(jnp.float32))

  def chunk_step(s_BxHxKxV, x):
    u_tilde, w, qk_decay, q_decay, k_decay, b_last = x
    u_BxHxCxV = u_tilde - mm.matmul(w, s_BxHxKxV)
    o = mm.matmul(q_decay, s_BxHxKxV) + mm.matmul(qk_decay, u_BxHxCxV)
    s_new = (jnp.exp(b_last)[..., None, None] * s_BxHxKxV + mm.matmul_tn(k_decay, u_BxHxCxV))
    return s_new, scale * o

  s_final, o_N = jax.lax.scan(chunk_step, s0, factors)
  o_NxBxCxHxV = jnp.moveaxis(o_N, 2, 3)
  return unchunk(o_NxBxCxHxV, t).astype(q.dtype), s_final
