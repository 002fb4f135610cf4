"""The per-chunk math of the Pallas kernels (TPU and GPU share it) and their ``custom_vjp``s:

* ``state_scan``: the sequential part of a chunked linear recurrence given precomputed
  factors (the gated delta rule's kernels);
* ``gla_scan``: simple GLA fused, the kernels building the factors themselves (below).

``state_scan``, in detail.
Per chunk n (C tokens), with the state S [K, V] before the chunk:

  u  = u~ - W S                       (delta rule; simple GLA has no W and u~ = v)
  o  = Qd S + Aqk u                   Qd [C, K], Aqk [C, C] (scale and decay folded in)
  S' = gamma S + Kd^T u               gamma = exp(sum of g over the chunk), Kd [C, K]

Everything that does not depend on S (the decays, Aqk, the WY factors) is computed in XLA by
the caller and differentiated by JAX; only this scan, whose backward is a reverse chunk scan,
runs in Pallas. The backward of one chunk, with dS' the cotangent of the state after it:

  du = Aqk^T do + Kd dS'     dAqk = do u^T     dQd = do S^T     dKd = u dS'^T
  du~ = du    dW = -du S^T   dgamma = <S, dS'>   dS = Qd^T do + gamma dS' - W^T du

Kernel layout: [B, H, N*C, X] float32 (one head's sequence contiguous). gamma is either per
token ([B, H, N*C, 1], every row of a chunk holding the chunk's value: a plain 2-D block, for
Triton) or per chunk ([B, H, N, 1, 1], for Mosaic: TPU pads a [T, 1] float32 array to 128
lanes, which made it as large in HBM as a [T, 128] factor).
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
  """(o [C, V], S' [K, V]) of one chunk; ``w`` is None for simple GLA (u = u~ = v)."""
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
  backend (hashable), each called as in ``_fwd`` / ``_bwd``. All inputs are arrays."""
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
  if gam.ndim == 4:
    # Per token: the kernels read gamma from a chunk's first row, write dgamma into all rows.
    first_row = (jnp.arange(gam.shape[2]) % chunk == 0)[:, None]
    dgam = jnp.where(first_row, dgam, 0.0)
  return dqd, dkd, dw, dut, daqk, dgam, ds0


state_scan.defvjp(_fwd, _bwd)


def entry_shapes(q, v, scale, initial_state):
  """(t, dk, dv, scale, s0) that every backend's entry point starts from: the sizes, the
  default scale dk**-0.5, and the float32 initial state (zeros when none is given)."""
  b, t, h, dk = q.shape
  dv = v.shape[-1]
  s0 = (jnp.zeros((b, h, dk, dv), jnp.float32) if initial_state is None
        else initial_state.astype(jnp.float32))
  return t, dk, dv, dk ** -0.5 if scale is None else scale, s0


def to_kernel_layout(x_BxTxHxX, t_padded):
  """[B, T, H(, X)] -> [B, H, T_padded, X or 1] float32; padded steps are zeros."""
  x = x_BxTxHxX.astype(jnp.float32)
  if x.ndim == 3:
    x = x[..., None]
  x = jnp.pad(x, ((0, 0), (0, t_padded - x.shape[1]), (0, 0), (0, 0)))
  return x.transpose(0, 2, 1, 3)


def from_kernel_layout(o_BxHxTpxV, t, dtype):
  return o_BxHxTpxV[:, :, :t].transpose(0, 2, 1, 3).astype(dtype)


# Fused simple GLA: the kernels also build a chunk's factors from q, k and the in-chunk
# cumulative log decay b (given as a column [C, 1] and as a row [1, C]), so nothing [C, C]
# goes through HBM, and push the factors' cotangents back to q, k and b themselves.


def _causal(c):
  return (jax.lax.broadcasted_iota(jnp.int32, (c, c), 0)
          >= jax.lax.broadcasted_iota(jnp.int32, (c, c), 1))


def gla_factors(q, k, b_col, b_row, b_last, scale):
  """(qd, kd, aqk, gam [1, 1], decay [C, C], exp(b_C - b) [C, 1]) of one chunk; b_last [1, 1]
  is b_col's last row (loaded from the ref: Triton cannot slice a value)."""
  c = q.shape[0]
  causal = _causal(c)
  decay = jnp.where(causal, jnp.exp(jnp.where(causal, b_col - b_row, 0.0)), 0.0)
  to_end = jnp.exp(b_last - b_col)
  aqk = scale * dot_nt(q, k) * decay
  return scale * q * jnp.exp(b_col), k * to_end, aqk, jnp.exp(b_last), decay, to_end


def gla_chunk_forward(q, k, v, b_col, b_row, b_last, s_KxV, scale):
  qd, kd, aqk, gam, _, _ = gla_factors(q, k, b_col, b_row, b_last, scale)
  return chunk_forward(qd, kd, None, v, aqk, gam, s_KxV)


def gla_chunk_backward(q, k, v, b_col, b_row, b_last, s_KxV, do, ds_next, scale):
  """(dq, dk, dv, db as a column [C, 1], db as a row [1, C], dS): the total db is their sum.
  With P = dAqk * Aqk: db_t gets <dQd_t, Qd_t> - <dKd_t, Kd_t> + sum_s P_ts - sum_s P_st, and
  b_C (through Kd and gamma) also sum <dKd, Kd> + dgamma gamma."""
  c = q.shape[0]
  qd, kd, aqk, gam, decay, to_end = gla_factors(q, k, b_col, b_row, b_last, scale)
  dqd, dkd, _, dv, daqk, dgam, ds = chunk_backward(qd, kd, None, v, aqk, gam, s_KxV, do, ds_next)
  daqk_decay = scale * daqk * decay
  dq = scale * dqd * jnp.exp(b_col) + dot(daqk_decay, k)
  dk = dkd * to_end + dot_tn(daqk_decay, q)
  p = daqk * aqk
  dkd_kd = jnp.sum(dkd * kd, axis=1, keepdims=True)                    # [C, 1]
  db_col = jnp.sum(dqd * qd, axis=1, keepdims=True) - dkd_kd + jnp.sum(p, axis=1, keepdims=True)
  db_last = jnp.sum(dkd_kd, axis=0, keepdims=True) + dgam * gam        # [1, 1]
  is_last = jax.lax.broadcasted_iota(jnp.int32, (c, 1), 0) == c - 1
  db_col = db_col + jnp.where(is_last, db_last, 0.0)
  return dq, dk, dv, db_col, -jnp.sum(p, axis=0, keepdims=True), ds


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1, 2))
def gla_scan(kernels, chunk, scale, q, k, v, b_col, b_row, s0):
  """Fused simple GLA: (o [B, H, N*C, V], final state). q, k, v [B, H, N*C, X] float32;
  b_col [B, H, N*C, 1] and b_row [B, H, N, C] the in-chunk cumulative log decay."""
  o, _, s_final = kernels[0](q, k, v, b_col, b_row, s0, chunk, scale)
  return o, s_final


def _gla_fwd(kernels, chunk, scale, q, k, v, b_col, b_row, s0):
  o, states, s_final = kernels[0](q, k, v, b_col, b_row, s0, chunk, scale)
  return (o, s_final), (q, k, v, b_col, b_row, states)


def _gla_bwd(kernels, chunk, scale, res, cts):
  return kernels[1](*res, *cts, chunk, scale)


gla_scan.defvjp(_gla_fwd, _gla_bwd)


def gla_inputs(q, k, v, g, chunk):
  """(q, k, v, b_col, b_row) for ``gla_scan``: T padded to a chunk multiple with k = v = 0,
  g = 0 (state-neutral); b = cumsum of g inside each chunk, in XLA (JAX differentiates it)."""
  t = q.shape[1]
  tp = -(-t // chunk) * chunk
  q, k, v = (to_kernel_layout(x, tp) for x in (q, k, v))
  g = to_kernel_layout(g, tp)[..., 0]
  b_, h_ = g.shape[:2]
  b_row = jnp.cumsum(g.reshape(b_, h_, tp // chunk, chunk), axis=-1)
  return q, k, v, b_row.reshape(b_, h_, tp, 1), b_row
