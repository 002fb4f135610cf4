"""Pallas GPU (Triton lowering) kernels: simple GLA fused (``gla_*``) and the delta rule's
state scan over precomputed WY factors (``forward``/``backward``, used by
``delta_rule.pallas_gpu``).

Grid (B, H): one program per head holds the state [K, V] and walks the chunks with a
``fori_loop`` (the backwards walk them in reverse carrying dS, reading the per-chunk states
the forward saved). Triton wants power-of-2 tensors and matmul dims >= 16, so the wrappers
zero-pad K, V and the chunk to such sizes, which leaves the recurrence unchanged. The
per-chunk math is ``state_scan``'s, shared with the TPU kernels.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltr

from pallas_kernels.linear_scan import state_scan

DEFAULT_CHUNK = 64
_PARAMS = pltr.CompilerParams(num_warps=4, num_stages=1)


def pow2_at_least_16(n):
  return max(16, 1 << (max(1, n) - 1).bit_length())


def gpu_chunk(chunk_size, t):
  return pow2_at_least_16(min(chunk_size, t))


def _whole(rows, cols):
  """The whole [rows, cols] slab of one (b, h)."""
  return pl.BlockSpec((None, None, rows, cols), lambda b, h: (b, h, 0, 0))


def _fwd_kernel(n, chunk, qd_ref, kd_ref, w_ref, ut_ref, aqk_ref, gam_ref, s0_ref, o_ref,
                states_ref, sfin_ref):
  dk = qd_ref.shape[-1]

  def step(i, s):
    rows = pl.ds(i * chunk, chunk)
    states_ref[pl.ds(i * dk, dk), :] = s
    o, s_new = state_scan.chunk_forward(
        qd_ref[rows, :], kd_ref[rows, :], w_ref[rows, :], ut_ref[rows, :], aqk_ref[rows, :],
        gam_ref[pl.ds(i * chunk, 1), :], s)
    o_ref[rows, :] = o
    return s_new

  sfin_ref[...] = jax.lax.fori_loop(0, n, step, s0_ref[...])


def forward(interpret, qd, kd, w, ut, aqk, gam, s0, chunk):
  b, h, tp, dk = qd.shape
  dv, n = ut.shape[-1], tp // chunk
  f32 = jnp.float32
  ins = [_whole(tp, dk)] * 3 + [_whole(tp, dv), _whole(tp, chunk), _whole(tp, 1), _whole(dk, dv)]
  return pl.pallas_call(
      functools.partial(_fwd_kernel, n, chunk),
      grid=(b, h),
      in_specs=ins,
      out_specs=[_whole(tp, dv), _whole(n * dk, dv), _whole(dk, dv)],
      out_shape=[jax.ShapeDtypeStruct((b, h, tp, dv), f32),
                 jax.ShapeDtypeStruct((b, h, n * dk, dv), f32),
                 jax.ShapeDtypeStruct((b, h, dk, dv), f32)],
      compiler_params=_PARAMS,
      interpret=interpret,
  )(qd, kd, w, ut, aqk, gam, s0)


def _bwd_kernel(n, chunk, qd_ref, kd_ref, w_ref, ut_ref, aqk_ref, gam_ref, states_ref, do_ref,
                dsfin_ref, dqd_ref, dkd_ref, dw_ref, dut_ref, daqk_ref, dgam_ref, ds0_ref):
  dk = qd_ref.shape[-1]

  def step(j, ds_next):
    i = n - 1 - j
    rows = pl.ds(i * chunk, chunk)
    dqd, dkd, dw, dut, daqk, dgam, ds = state_scan.chunk_backward(
        qd_ref[rows, :], kd_ref[rows, :], w_ref[rows, :], ut_ref[rows, :], aqk_ref[rows, :],
        gam_ref[pl.ds(i * chunk, 1), :],
        states_ref[pl.ds(i * dk, dk), :], do_ref[rows, :], ds_next)
    dqd_ref[rows, :] = dqd
    dkd_ref[rows, :] = dkd
    dw_ref[rows, :] = dw
    dut_ref[rows, :] = dut
    daqk_ref[rows, :] = daqk
    dgam_ref[rows, :] = jnp.broadcast_to(dgam, (chunk, 1))
    return ds

  ds0_ref[...] = jax.lax.fori_loop(0, n, step, dsfin_ref[...])


def backward(interpret, qd, kd, w, ut, aqk, gam, states, do, ds_final, chunk):
  b, h, tp, dk = qd.shape
  dv, n = ut.shape[-1], tp // chunk
  f32 = jnp.float32
  seq = [_whole(tp, dk)] * 3 + [_whole(tp, dv), _whole(tp, chunk), _whole(tp, 1)]
  shape = lambda d: jax.ShapeDtypeStruct((b, h, tp, d), f32)
  outs = [shape(dk)] * 3 + [shape(dv), shape(chunk), shape(1)]
  return tuple(pl.pallas_call(
      functools.partial(_bwd_kernel, n, chunk),
      grid=(b, h),
      in_specs=seq + [_whole(n * dk, dv), _whole(tp, dv), _whole(dk, dv)],
      out_specs=seq + [_whole(dk, dv)],
      out_shape=outs + [jax.ShapeDtypeStruct((b, h, dk, dv), f32)],
      compiler_params=_PARAMS,
      interpret=interpret,
  )(qd, kd, w, ut, aqk, gam, states, do, ds_final))


@functools.lru_cache(maxsize=None)
def kernels(interpret):
  """(forward, backward) for one interpret setting; cached so that custom_vjp's static
  argument is the same object on every call (jit cache hits)."""
  return functools.partial(forward, interpret), functools.partial(backward, interpret)


def last_b(bc_ref, i, chunk):
  """[1, 1]: chunk i's total log decay, read from memory (Triton cannot slice a value)."""
  return bc_ref[pl.ds(i * chunk + chunk - 1, 1), :]


def _gla_fwd_kernel(n, chunk, scale, q_ref, k_ref, v_ref, bc_ref, br_ref, s0_ref, o_ref,
                    states_ref, sfin_ref):
  dk = q_ref.shape[-1]

  def step(i, s):
    rows = pl.ds(i * chunk, chunk)
    states_ref[pl.ds(i * dk, dk), :] = s
    o, s_new = state_scan.gla_chunk_forward(
        q_ref[rows, :], k_ref[rows, :], v_ref[rows, :], bc_ref[rows, :], br_ref[pl.ds(i, 1), :],
        last_b(bc_ref, i, chunk), s, scale)
    o_ref[rows, :] = o
    return s_new

  sfin_ref[...] = jax.lax.fori_loop(0, n, step, s0_ref[...])


def gla_forward(interpret, q, k, v, b_col, b_row, s0, chunk, scale):
  b, h, tp, dk = q.shape
  dv, n = v.shape[-1], tp // chunk
  f32 = jnp.float32
  return pl.pallas_call(
      functools.partial(_gla_fwd_kernel, n, chunk, scale),
      grid=(b, h),
      in_specs=[_whole(tp, dk), _whole(tp, dk), _whole(tp, dv), _whole(tp, 1), _whole(n, chunk),
                _whole(dk, dv)],
      out_specs=[_whole(tp, dv), _whole(n * dk, dv), _whole(dk, dv)],
      out_shape=[jax.ShapeDtypeStruct((b, h, tp, dv), f32),
                 jax.ShapeDtypeStruct((b, h, n * dk, dv), f32),
                 jax.ShapeDtypeStruct((b, h, dk, dv), f32)],
      compiler_params=_PARAMS,
      interpret=interpret,
  )(q, k, v, b_col, b_row, s0)


def _gla_bwd_kernel(n, chunk, scale, q_ref, k_ref, v_ref, bc_ref, br_ref, states_ref, do_ref,
                    dsfin_ref, dq_ref, dk_ref, dv_ref, dbc_ref, dbr_ref, ds0_ref):
  dk = q_ref.shape[-1]

  def step(j, ds_next):
    i = n - 1 - j
    rows = pl.ds(i * chunk, chunk)
    dq, dk_, dv, db_col, db_row, ds = state_scan.gla_chunk_backward(
        q_ref[rows, :], k_ref[rows, :], v_ref[rows, :], bc_ref[rows, :], br_ref[pl.ds(i, 1), :],
        last_b(bc_ref, i, chunk), states_ref[pl.ds(i * dk, dk), :], do_ref[rows, :], ds_next,
        scale)
    dq_ref[rows, :] = dq
    dk_ref[rows, :] = dk_
    dv_ref[rows, :] = dv
    dbc_ref[rows, :] = db_col
    dbr_ref[pl.ds(i, 1), :] = db_row
    return ds

  ds0_ref[...] = jax.lax.fori_loop(0, n, step, dsfin_ref[...])


def gla_backward(interpret, q, k, v, b_col, b_row, states, do, ds_final, chunk, scale):
  b, h, tp, dk = q.shape
  dv, n = v.shape[-1], tp // chunk
  f32 = jnp.float32
  seq = [_whole(tp, dk), _whole(tp, dk), _whole(tp, dv), _whole(tp, 1), _whole(n, chunk)]
  shape = lambda d: jax.ShapeDtypeStruct((b, h, tp, d), f32)
  return tuple(pl.pallas_call(
      functools.partial(_gla_bwd_kernel, n, chunk, scale),
      grid=(b, h),
      in_specs=seq + [_whole(n * dk, dv), _whole(tp, dv), _whole(dk, dv)],
      out_specs=seq + [_whole(dk, dv)],
      out_shape=[shape(dk), shape(dk), shape(dv), shape(1),
                 jax.ShapeDtypeStruct((b, h, n, chunk), f32),
                 jax.ShapeDtypeStruct((b, h, dk, dv), f32)],
      compiler_params=_PARAMS,
      interpret=interpret,
  )(q, k, v, b_col, b_row, states, do, ds_final))


@functools.lru_cache(maxsize=None)
def gla_kernels(interpret):
  return functools.partial(gla_forward, interpret), functools.partial(gla_backward, interpret)


def pad_last(x, size):
  return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, size - x.shape[-1])])


def pad_state(s_BxHxKxV, dk, dv):
  return jnp.pad(s_BxHxKxV, ((0, 0), (0, 0), (0, dk - s_BxHxKxV.shape[2]),
                             (0, dv - s_BxHxKxV.shape[3])))


def simple_gla(q, k, v, g, *, scale=None, initial_state=None, chunk_size=DEFAULT_CHUNK,
               interpret=False):
  """Fused: the kernels build each chunk's decays and q k^T themselves; XLA only pads and
  takes the in-chunk cumulative sum of g."""
  b, t, h, dk = q.shape
  dv = v.shape[-1]
  scale = dk ** -0.5 if scale is None else float(scale)
  chunk = gpu_chunk(chunk_size, t)
  kp, vp = pow2_at_least_16(dk), pow2_at_least_16(dv)
  q, k, v, b_col, b_row = state_scan.gla_inputs(q_in := q, k, v, g, chunk)
  s0 = (jnp.zeros((b, h, dk, dv), jnp.float32) if initial_state is None
        else initial_state.astype(jnp.float32))
  o, s_final = state_scan.gla_scan(gla_kernels(interpret), chunk, scale, pad_last(q, kp),
                                   pad_last(k, kp), pad_last(v, vp), b_col, b_row,
                                   pad_state(s0, kp, vp))
  return state_scan.from_kernel_layout(o[..., :dv], t, q_in.dtype), s_final[:, :, :dk, :dv]
