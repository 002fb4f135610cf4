"""Simple GLA on TPU (Mosaic): the chunk-sequential state scan as Pallas kernels.

Grid (B, H, N chunks): B and H "parallel", the chunk axis "arbitrary" (sequential on a core)
with the state [K, V] carried in a VMEM scratch. The backward walks the chunks in reverse
(index maps n -> N-1-n) carrying dS, and reads the per-chunk states the forward saved.
The state-independent factors (decays, Aqk) come from XLA (``state_scan.simple_gla_factors``).
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pallas_kernels.linear_scan import state_scan

DEFAULT_CHUNK = 128
_SEMANTICS = pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "arbitrary"))


def tpu_chunk(chunk_size, t):
  """A multiple of 8 (sublane tiling), no longer than T rounded up to 8."""
  c = min(chunk_size, -(-t // 8) * 8)
  return max(8, -(-c // 8) * 8)


def _specs(chunk, dk, dv, n, has_w, reverse=False):
  at = (lambda b, h, i: (b, h, n - 1 - i, 0)) if reverse else (lambda b, h, i: (b, h, i, 0))
  blk = lambda d: pl.BlockSpec((None, None, chunk, d), at)
  specs = [blk(dk), blk(dk)] + ([blk(dk)] if has_w else []) + [blk(dv), blk(chunk), blk(1)]
  return specs, blk


def _fwd_kernel(has_w, n, *refs):
  if has_w:
    qd_ref, kd_ref, w_ref, ut_ref, aqk_ref, gam_ref, s0_ref, o_ref, states_ref, sfin_ref, s_scr = refs
  else:
    qd_ref, kd_ref, ut_ref, aqk_ref, gam_ref, s0_ref, o_ref, states_ref, sfin_ref, s_scr = refs
    w_ref = None
  i = pl.program_id(2)

  @pl.when(i == 0)
  def _():
    s_scr[...] = s0_ref[...]

  s = s_scr[...]
  states_ref[...] = s
  o, s_new = state_scan.chunk_forward(qd_ref[...], kd_ref[...], None if w_ref is None else w_ref[...],
                                      ut_ref[...], aqk_ref[...], gam_ref[0:1, :], s)
  o_ref[...] = o
  s_scr[...] = s_new

  @pl.when(i == n - 1)
  def _():
    sfin_ref[...] = s_new


def forward(interpret, qd, kd, w, ut, aqk, gam, s0, chunk):
  b, h, tp, dk = qd.shape
  dv, n = ut.shape[-1], tp // chunk
  has_w = w is not None
  specs, blk = _specs(chunk, dk, dv, n, has_w)
  state_spec = pl.BlockSpec((None, None, dk, dv), lambda b, h, i: (b, h, 0, 0))
  f32 = jnp.float32
  return pl.pallas_call(
      functools.partial(_fwd_kernel, has_w, n),
      grid=(b, h, n),
      in_specs=specs + [state_spec],
      out_specs=[blk(dv), pl.BlockSpec((None, None, dk, dv), lambda b, h, i: (b, h, i, 0)),
                 state_spec],
      out_shape=[jax.ShapeDtypeStruct((b, h, tp, dv), f32),
                 jax.ShapeDtypeStruct((b, h, n * dk, dv), f32),
                 jax.ShapeDtypeStruct((b, h, dk, dv), f32)],
      scratch_shapes=[pltpu.VMEM((dk, dv), f32)],
      compiler_params=_SEMANTICS,
      interpret=interpret,
  )(*[x for x in (qd, kd, w, ut, aqk, gam, s0) if x is not None])


def _bwd_kernel(has_w, n, *refs):
  if has_w:
    (qd_ref, kd_ref, w_ref, ut_ref, aqk_ref, gam_ref, states_ref, do_ref, dsfin_ref,
     dqd_ref, dkd_ref, dw_ref, dut_ref, daqk_ref, dgam_ref, ds0_ref, ds_scr) = refs
  else:
    (qd_ref, kd_ref, ut_ref, aqk_ref, gam_ref, states_ref, do_ref, dsfin_ref,
     dqd_ref, dkd_ref, dut_ref, daqk_ref, dgam_ref, ds0_ref, ds_scr) = refs
    w_ref = dw_ref = None
  i = pl.program_id(2)

  @pl.when(i == 0)
  def _():
    ds_scr[...] = dsfin_ref[...]

  dqd, dkd, dw, dut, daqk, dgam, ds = state_scan.chunk_backward(
      qd_ref[...], kd_ref[...], None if w_ref is None else w_ref[...], ut_ref[...], aqk_ref[...],
      gam_ref[0:1, :], states_ref[...], do_ref[...], ds_scr[...])
  dqd_ref[...], dkd_ref[...], dut_ref[...], daqk_ref[...] = dqd, dkd, dut, daqk
  if dw_ref is not None:
    dw_ref[...] = dw
  dgam_ref[...] = jnp.broadcast_to(dgam, dgam_ref.shape)
  ds_scr[...] = ds

  @pl.when(i == n - 1)
  def _():
    ds0_ref[...] = ds


def backward(interpret, qd, kd, w, ut, aqk, gam, states, do, ds_final, chunk):
  b, h, tp, dk = qd.shape
  dv, n = ut.shape[-1], tp // chunk
  has_w = w is not None
  specs, blk = _specs(chunk, dk, dv, n, has_w, reverse=True)
  state_at = pl.BlockSpec((None, None, dk, dv), lambda b, h, i: (b, h, n - 1 - i, 0))
  final = pl.BlockSpec((None, None, dk, dv), lambda b, h, i: (b, h, 0, 0))
  f32 = jnp.float32
  seq = lambda d: jax.ShapeDtypeStruct((b, h, tp, d), f32)
  outs = [seq(dk), seq(dk)] + ([seq(dk)] if has_w else []) + [seq(dv), seq(chunk), seq(1)]
  res = pl.pallas_call(
      functools.partial(_bwd_kernel, has_w, n),
      grid=(b, h, n),
      in_specs=specs + [state_at, blk(dv), final],
      out_specs=specs + [final],
      out_shape=outs + [jax.ShapeDtypeStruct((b, h, dk, dv), f32)],
      scratch_shapes=[pltpu.VMEM((dk, dv), f32)],
      compiler_params=_SEMANTICS,
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


def simple_gla(q, k, v, g, *, scale=None, initial_state=None, chunk_size=DEFAULT_CHUNK,
               interpret=False):
  b, t, h, dk = q.shape
  dv = v.shape[-1]
  scale = dk ** -0.5 if scale is None else scale
  chunk = tpu_chunk(chunk_size, t)
  qd, kd, ut, aqk, gam = state_scan.simple_gla_factors(q, k, v, g, scale, chunk)
  s0 = (jnp.zeros((b, h, dk, dv), jnp.float32) if initial_state is None
        else initial_state.astype(jnp.float32))
  o, s_final = state_scan.state_scan(kernels(interpret), chunk, qd, kd, None, ut, aqk, gam, s0)
  return state_scan.from_kernel_layout(o, t, q.dtype), s_final
