"""The sequential part of a chunked linear recurrence, shared by the Pallas kernels of simple
GLA and of the gated delta rule, with its hand-written backward (``jax.custom_vjp``).

Per chunk n (C tokens), with the state S [K, V] before the chunk:

  u  = u~ - W S                       (delta rule; simple GLA has no W and u~ = v)
  o  = Qd S + Aqk u                   Qd [C, K], Aqk [C, C] (scale and decay folded in)
  S' = gamma S + Kd^T u               gamma = exp(sum of g over the chunk), Kd [C, K]

Everything that does not depend on S (the decays, Aqk, the WY factors) is computed in XLA by
the callers and differentiated by JAX; only this scan, whose backward is a reverse chunk scan,
runs in Pallas. The backward of one chunk, with dS' the cotangent of the state after it:

  du = Aqk^T do + Kd dS'     dAqk = do u^T     dQd = do S^T     dKd = u dS'^T
  du~ = du    dW = -du S^T   dgamma = <S, dS'>   dS = Qd^T do + gamma dS' - W^T du

Kernel layout: [B, H, N*C, X] float32 (one head's sequence contiguous); gamma is stored per
token ([B, H, N*C, 1], every row of a chunk holding the chunk's value) so that every operand
is a plain 2-D block.
"""

import functools

import jax
import jax.numpy as jnp


def dot(a, b):
  return jax.lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32)


def dot_tn(a, b):
  """a^T b without materialising the transpose."""
  return jax.lax.dot_general(a, b, (((0,), (0,)), ((), ())), preferred_element_type=jnp.float32)


def dot_nt(a, b):
  """a b^T without materialising the transpose."""
  return jax.lax.dot_general(a, b, (((1,), (1,)), ((), ())), preferred_element_type=jnp.float32)


def chunk_forward(qd, kd, w, ut, aqk, gam_1x1, s_KxV):
  """(o [C, V], S' [K, V]) of one chunk; ``w`` is None for simple GLA."""
  u = ut if w is None else ut - dot(w, s_KxV)
  o = dot(qd, s_KxV) + dot(aqk, u)
  return o, gam_1x1 * s_KxV + dot_tn(kd, u)


def chunk_backward(qd, kd, w, ut, aqk, gam_1x1, s_KxV, do, ds_next):
  """Cotangents of one chunk: (dqd, dkd, dw | None, dut, daqk, dgam [1, 1], dS [K, V])."""
  u = ut if w is None else ut - dot(w, s_KxV)
  du = dot_tn(aqk, do) + dot(kd, ds_next)
  dgam = jnp.sum(jnp.sum(s_KxV * ds_next, axis=1, keepdims=True), axis=0, keepdims=True)
  ds = dot_tn(qd, do) + gam_1x1 * ds_next
  dw = None
  if w is not None:
    dw = -dot_nt(du, s_KxV)
    ds = ds - dot_tn(w, du)
  return dot_nt(do, s_KxV), dot_nt(u, ds_next), dw, du, dot_nt(do, u), dgam, ds


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def state_scan(kernels, chunk, qd, kd, w, ut, aqk, gam, s0):
  """(o [B, H, N*C, V], final state [B, H, K, V]); ``kernels`` = (forward, backward) of one
  backend (hashable), each called as in ``_fwd`` / ``_bwd``."""
  o, _, s_final = kernels[0](qd, kd, w, ut, aqk, gam, s0, chunk)
  return o, s_final


def _fwd(kernels, chunk, qd, kd, w, ut, aqk, gam, s0):
  o, states, s_final = kernels[0](qd, kd, w, ut, aqk, gam, s0, chunk)
  return (o, s_final), (qd, kd, w, ut, aqk, gam, states)


def _bwd(kernels, chunk, res, cts):
  qd, kd, w, ut, aqk, gam, states = res
  do, ds_final = cts
  dqd, dkd, dw, dut, daqk, dgam, ds0 = kernels[1](qd, kd, w, ut, aqk, gam, states, do,
                                                  ds_final, chunk)
  # The kernels read gamma from a chunk's first row and write dgamma into all its rows.
  first_row = (jnp.arange(gam.shape[2]) % chunk == 0)[:, None]
  return dqd, dkd, dw, dut, daqk, jnp.where(first_row, dgam, 0.0), ds0


state_scan.defvjp(_fwd, _bwd)


def to_kernel_layout(x_BxTxHxX, t_padded):
  """[B, T, H(, X)] -> [B, H, T_padded, X or 1] float32; padded steps are zeros."""
  x = x_BxTxHxX.astype(jnp.float32)
  if x.ndim == 3:
    x = x[..., None]
  x = jnp.pad(x, ((0, 0), (0, t_padded - x.shape[1]), (0, 0), (0, 0)))
  return x.transpose(0, 2, 1, 3)


def simple_gla_factors(q, k, v, g, scale, chunk):
  """(qd, kd, ut, aqk, gam) of simple GLA in kernel layout; T padded to a chunk multiple with
  k = v = 0, g = 0, which leaves the state unchanged."""
  t = q.shape[1]
  n = -(-t // chunk)
  tp = n * chunk
  q, k, ut = (to_kernel_layout(x, tp) for x in (q, k, v))
  g = to_kernel_layout(g, tp)[..., 0]                                   # [B, H, Tp]
  b_, h_ = g.shape[:2]
  b_BxHxNxC = jnp.cumsum(g.reshape(b_, h_, n, chunk), axis=-1)
  b_last = b_BxHxNxC[..., -1:]
  causal = jnp.tril(jnp.ones((chunk, chunk), bool))
  diff = b_BxHxNxC[..., :, None] - b_BxHxNxC[..., None, :]
  decay_BxHxNxCxC = jnp.exp(jnp.where(causal, diff, -jnp.inf))
  qc, kc = (x.reshape(b_, h_, n, chunk, -1) for x in (q, k))
  aqk = scale * jnp.einsum("bhnck,bhnsk->bhncs", qc, kc) * decay_BxHxNxCxC
  qd = scale * qc * jnp.exp(b_BxHxNxC)[..., None]
  kd = kc * jnp.exp(b_last - b_BxHxNxC)[..., None]
  gam = jnp.broadcast_to(jnp.exp(b_last), b_BxHxNxC.shape)
  flat = lambda x: x.reshape(b_, h_, tp, -1)
  return flat(qd), flat(kd), ut, flat(aqk), flat(gam)


def from_kernel_layout(o_BxHxTpxV, t, dtype):
  return o_BxHxTpxV[:, :, :t].transpose(0, 2, 1, 3).astype(dtype)
