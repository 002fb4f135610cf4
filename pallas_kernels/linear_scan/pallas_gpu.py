"""Simple GLA on GPU (Pallas' Triton lowering): the chunk-sequential state scan as kernels.

Grid (B, H): one program per head holds the state [K, V] in registers and walks the chunks
with a ``fori_loop`` (the backward walks them in reverse carrying dS, reading the per-chunk
states the forward saved). Triton wants power-of-2 tensors and matmul dims >= 16, so the
wrapper pads K, V and the chunk to such sizes with zeros, which leave the recurrence unchanged.
The state-independent factors (decays, Aqk) come from XLA (``state_scan.simple_gla_factors``).
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


def _fwd_kernel(has_w, n, chunk, *refs):
  if has_w:
    qd_ref, kd_ref, w_ref, ut_ref, aqk_ref, gam_ref, s0_ref, o_ref, states_ref, sfin_ref = refs
  else:
    qd_ref, kd_ref, ut_ref, aqk_ref, gam_ref, s0_ref, o_ref, states_ref, sfin_ref = refs
    w_ref = None
  dk = qd_ref.shape[-1]

  def step(i, s):
    rows = pl.ds(i * chunk, chunk)
    states_ref[pl.ds(i * dk, dk), :] = s
    o, s_new = state_scan.chunk_forward(
        qd_ref[rows, :], kd_ref[rows, :], None if w_ref is None else w_ref[rows, :],
        ut_ref[rows, :], aqk_ref[rows, :], gam_ref[pl.ds(i * chunk, 1), :], s)
    o_ref[rows, :] = o
    return s_new

  sfin_ref[...] = jax.lax.fori_loop(0, n, step, s0_ref[...])


def forward(interpret, qd, kd, w, ut, aqk, gam, s0, chunk):
  b, h, tp, dk = qd.shape
  dv, n = ut.shape[-1], tp // chunk
  has_w = w is not None
  f32 = jnp.float32
  ins = [_whole(tp, dk)] * (3 if has_w else 2) + [_whole(tp, dv), _whole(tp, chunk),
                                                   _whole(tp, 1), _whole(dk, dv)]
  return pl.pallas_call(
      functools.partial(_fwd_kernel, has_w, n, chunk),
      grid=(b, h),
      in_specs=ins,
      out_specs=[_whole(tp, dv), _whole(n * dk, dv), _whole(dk, dv)],
      out_shape=[jax.ShapeDtypeStruct((b, h, tp, dv), f32),
                 jax.ShapeDtypeStruct((b, h, n * dk, dv), f32),
                 jax.ShapeDtypeStruct((b, h, dk, dv), f32)],
      compiler_params=_PARAMS,
      interpret=interpret,
  )(*[x for x in (qd, kd, w, ut, aqk, gam, s0) if x is not None])


def _bwd_kernel(has_w, n, chunk, *refs):
  if has_w:
    (qd_ref, kd_ref, w_ref, ut_ref, aqk_ref, gam_ref, states_ref, do_ref, dsfin_ref,
     dqd_ref, dkd_ref, dw_ref, dut_ref, daqk_ref, dgam_ref, ds0_ref) = refs
  else:
    (qd_ref, kd_ref, ut_ref, aqk_ref, gam_ref, states_ref, do_ref, dsfin_ref,
     dqd_ref, dkd_ref, dut_ref, daqk_ref, dgam_ref, ds0_ref) = refs
    w_ref = dw_ref = None
  dk = qd_ref.shape[-1]

  def step(j, ds_next):
    i = n - 1 - j
    rows = pl.ds(i * chunk, chunk)
    dqd, dkd, dw, dut, daqk, dgam, ds = state_scan.chunk_backward(
        qd_ref[rows, :], kd_ref[rows, :], None if w_ref is None else w_ref[rows, :],
        ut_ref[rows, :], aqk_ref[rows, :], gam_ref[pl.ds(i * chunk, 1), :],
        states_ref[pl.ds(i * dk, dk), :], do_ref[rows, :], ds_next)
    dqd_ref[rows, :] = dqd
    dkd_ref[rows, :] = dkd
    if dw_ref is not None:
      dw_ref[rows, :] = dw
    dut_ref[rows, :] = dut
    daqk_ref[rows, :] = daqk
    dgam_ref[rows, :] = jnp.broadcast_to(dgam, (chunk, 1))
    return ds

  ds0_ref[...] = jax.lax.fori_loop(0, n, step, dsfin_ref[...])


def backward(interpret, qd, kd, w, ut, aqk, gam, states, do, ds_final, chunk):
  b, h, tp, dk = qd.shape
  dv, n = ut.shape[-1], tp // chunk
  has_w = w is not None
  f32 = jnp.float32
  seq = [_whole(tp, dk)] * (3 if has_w else 2) + [_whole(tp, dv), _whole(tp, chunk), _whole(tp, 1)]
  shape = lambda d: jax.ShapeDtypeStruct((b, h, tp, d), f32)
  outs = [shape(dk)] * (3 if has_w else 2) + [shape(dv), shape(chunk), shape(1)]
  res = pl.pallas_call(
      functools.partial(_bwd_kernel, has_w, n, chunk),
      grid=(b, h),
      in_specs=seq + [_whole(n * dk, dv), _whole(tp, dv), _whole(dk, dv)],
      out_specs=seq + [_whole(dk, dv)],
      out_shape=outs + [jax.ShapeDtypeStruct((b, h, dk, dv), f32)],
      compiler_params=_PARAMS,
      interpret=interpret,
  )(*[x for x in (qd, kd, w, ut, aqk, gam, states, do, ds_final) if x is not None])
  if not has_w:
    res = (*res[:2], None, *res[2:])
  return tuple(res)


@functools.lru_cache(maxsize=None)
def kernels(interpret):
  """(forward, backward) for one interpret setting; cached so that custom_vjp's static
  argument is the same object on every call (jit cache hits)."""
  return functools.partial(forward, interpret), functools.partial(backward, interpret)


def pad_last(x, size):
  return jnp.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, size - x.shape[-1])])


def pad_state(s_BxHxKxV, dk, dv):
  return jnp.pad(s_BxHxKxV, ((0, 0), (0, 0), (0, dk - s_BxHxKxV.shape[2]),
                             (0, dv - s_BxHxKxV.shape[3])))


def simple_gla(q, k, v, g, *, scale=None, initial_state=None, chunk_size=DEFAULT_CHUNK,
               interpret=False):
  b, t, h, dk = q.shape
  dv = v.shape[-1]
  scale = dk ** -0.5 if scale is None else scale
  chunk = gpu_chunk(chunk_size, t)
  kp, vp = pow2_at_least_16(dk), pow2_at_least_16(dv)
  qd, kd, ut, aqk, gam = state_scan.simple_gla_factors(q, k, v, g, scale, chunk)
  qd, kd, ut = pad_last(qd, kp), pad_last(kd, kp), pad_last(ut, vp)
  s0 = (jnp.zeros((b, h, dk, dv), jnp.float32) if initial_state is None
        else initial_state.astype(jnp.float32))
  o, s_final = state_scan.state_scan(kernels(interpret), chunk, qd, kd, None, ut, aqk, gam,
                                     pad_state(s0, kp, vp))
  return state_scan.from_kernel_layout(o[..., :dv], t, q.dtype), s_final[:, :, :dk, :dv]
