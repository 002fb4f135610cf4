"""Pallas TPU (Mosaic) kernels: simple GLA fused (``gla_*``) and the delta rule's state scan
over precomputed WY factors (``forward``/``backward``, used by ``delta_rule.pallas_tpu``).

Grid (B, H, N chunks): B and H "parallel", the chunk axis "arbitrary" (sequential on a core)
with the state [K, V] carried in a VMEM scratch. The backwards walk the chunks in reverse
(index maps n -> N-1-n) carrying dS, and read the per-chunk states the forward saved.
The per-chunk math is ``state_scan``'s, shared with the GPU kernels.
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


def _specs(chunk, dk, dv, n, reverse=False):
  at = (lambda b, h, i: (b, h, n - 1 - i, 0)) if reverse else (lambda b, h, i: (b, h, i, 0))
  blk = lambda d: pl.BlockSpec((None, None, chunk, d), at)
  return [blk(dk), blk(dk), blk(dk), blk(dv), blk(chunk), blk(1)], blk


def _fwd_kernel(n, qd_ref, kd_ref, w_ref, ut_ref, aqk_ref, gam_ref, s0_ref, o_ref, states_ref,
                sfin_ref, s_scr):
  i = pl.program_id(2)

  @pl.when(i == 0)
  def _():
    s_scr[...] = s0_ref[...]

  s = s_scr[...]
  states_ref[...] = s
  o, s_new = state_scan.chunk_forward(qd_ref[...], kd_ref[...], w_ref[...], ut_ref[...],
                                      aqk_ref[...], gam_ref[0:1, :], s)
  o_ref[...] = o
  s_scr[...] = s_new

  @pl.when(i == n - 1)
  def _():
    sfin_ref[...] = s_new


def forward(interpret, qd, kd, w, ut, aqk, gam, s0, chunk):
  b, h, tp, dk = qd.shape
  dv, n = ut.shape[-1], tp // chunk
  specs, blk = _specs(chunk, dk, dv, n)
  state_spec = pl.BlockSpec((None, None, dk, dv), lambda b, h, i: (b, h, 0, 0))
  f32 = jnp.float32
  return pl.pallas_call(
      functools.partial(_fwd_kernel, n),
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
  )(qd, kd, w, ut, aqk, gam, s0)


def _bwd_kernel(n, qd_ref, kd_ref, w_ref, ut_ref, aqk_ref, gam_ref, states_ref, do_ref, dsfin_ref,
                dqd_ref, dkd_ref, dw_ref, dut_ref, daqk_ref, dgam_ref, ds0_ref, ds_scr):
  i = pl.program_id(2)

  @pl.when(i == 0)
  def _():
    ds_scr[...] = dsfin_ref[...]

  dqd, dkd, dw, dut, daqk, dgam, ds = state_scan.chunk_backward(
      qd_ref[...], kd_ref[...], w_ref[...], ut_ref[...], aqk_ref[...], gam_ref[0:1, :],
      states_ref[...], do_ref[...], ds_scr[...])
  dqd_ref[...], dkd_ref[...], dw_ref[...], dut_ref[...], daqk_ref[...] = dqd, dkd, dw, dut, daqk
  dgam_ref[...] = jnp.broadcast_to(dgam, dgam_ref.shape)
  ds_scr[...] = ds

  @pl.when(i == n - 1)
  def _():
    ds0_ref[...] = ds


def backward(interpret, qd, kd, w, ut, aqk, gam, states, do, ds_final, chunk):
  b, h, tp, dk = qd.shape
  dv, n = ut.shape[-1], tp // chunk
  specs, blk = _specs(chunk, dk, dv, n, reverse=True)
  state_at = pl.BlockSpec((None, None, dk, dv), lambda b, h, i: (b, h, n - 1 - i, 0))
  final = pl.BlockSpec((None, None, dk, dv), lambda b, h, i: (b, h, 0, 0))
  f32 = jnp.float32
  seq = lambda d: jax.ShapeDtypeStruct((b, h, tp, d), f32)
  outs = [seq(dk), seq(dk), seq(dk), seq(dv), seq(chunk), seq(1)]
  return tuple(pl.pallas_call(
      functools.partial(_bwd_kernel, n),
      grid=(b, h, n),
      in_specs=specs + [state_at, blk(dv), final],
      out_specs=specs + [final],
      out_shape=outs + [jax.ShapeDtypeStruct((b, h, dk, dv), f32)],
      scratch_shapes=[pltpu.VMEM((dk, dv), f32)],
      compiler_params=_SEMANTICS,
      interpret=interpret,
  )(qd, kd, w, ut, aqk, gam, states, do, ds_final))


@functools.lru_cache(maxsize=None)
def kernels(interpret):
  """(forward, backward) for one interpret setting; cached so that custom_vjp's static
  argument is the same object on every call (jit cache hits)."""
  return functools.partial(forward, interpret), functools.partial(backward, interpret)


def _gla_fwd_kernel(n, chunk, scale, q_ref, k_ref, v_ref, bc_ref, br_ref, s0_ref, o_ref, states_ref,
                    sfin_ref, s_scr):
  i = pl.program_id(2)

  @pl.when(i == 0)
  def _():
    s_scr[...] = s0_ref[...]

  s = s_scr[...]
  states_ref[...] = s
  o, s_new = state_scan.gla_chunk_forward(q_ref[...], k_ref[...], v_ref[...], bc_ref[...],
                                          br_ref[...], bc_ref[chunk - 1:chunk, :], s, scale)
  o_ref[...] = o
  s_scr[...] = s_new

  @pl.when(i == n - 1)
  def _():
    sfin_ref[...] = s_new


def _gla_specs(chunk, dk, dv, n, reverse=False):
  at = (lambda b, h, i: (b, h, n - 1 - i, 0)) if reverse else (lambda b, h, i: (b, h, i, 0))
  blk = lambda d: pl.BlockSpec((None, None, chunk, d), at)
  row_at = ((lambda b, h, i: (b, h, n - 1 - i, 0, 0)) if reverse
            else (lambda b, h, i: (b, h, i, 0, 0)))
  row = pl.BlockSpec((None, None, None, 1, chunk), row_at)
  state = pl.BlockSpec((None, None, dk, dv), lambda b, h, i: (b, h, 0, 0))
  states = pl.BlockSpec((None, None, dk, dv), lambda b, h, i: (b, h, at(b, h, i)[2], 0))
  return [blk(dk), blk(dk), blk(dv), blk(1), row], state, states, blk


def gla_forward(interpret, q, k, v, b_col, b_row, s0, chunk, scale):
  b, h, tp, dk = q.shape
  dv, n = v.shape[-1], tp // chunk
  ins, state, states, blk = _gla_specs(chunk, dk, dv, n)
  f32 = jnp.float32
  return pl.pallas_call(
      functools.partial(_gla_fwd_kernel, n, chunk, scale),
      grid=(b, h, n),
      in_specs=ins + [state],
      out_specs=[blk(dv), states, state],
      out_shape=[jax.ShapeDtypeStruct((b, h, tp, dv), f32),
                 jax.ShapeDtypeStruct((b, h, n * dk, dv), f32),
                 jax.ShapeDtypeStruct((b, h, dk, dv), f32)],
      scratch_shapes=[pltpu.VMEM((dk, dv), f32)],
      compiler_params=_SEMANTICS,
      interpret=interpret,
  )(q, k, v, b_col, b_row.reshape(b, h, n, 1, chunk), s0)


def _gla_bwd_kernel(n, chunk, scale, q_ref, k_ref, v_ref, bc_ref, br_ref, states_ref, do_ref,
                    dsfin_ref, dq_ref, dk_ref, dv_ref, dbc_ref, dbr_ref, ds0_ref, ds_scr):
  i = pl.program_id(2)

  @pl.when(i == 0)
  def _():
    ds_scr[...] = dsfin_ref[...]

  dq, dk, dv, db_col, db_row, ds = state_scan.gla_chunk_backward(
      q_ref[...], k_ref[...], v_ref[...], bc_ref[...], br_ref[...], bc_ref[chunk - 1:chunk, :],
      states_ref[...],
      do_ref[...], ds_scr[...], scale)
  dq_ref[...], dk_ref[...], dv_ref[...], dbc_ref[...], dbr_ref[...] = dq, dk, dv, db_col, db_row
  ds_scr[...] = ds

  @pl.when(i == n - 1)
  def _():
    ds0_ref[...] = ds


def gla_backward(interpret, q, k, v, b_col, b_row, states, do, ds_final, chunk, scale):
  b, h, tp, dk = q.shape
  dv, n = v.shape[-1], tp // chunk
  ins, state, states_spec, blk = _gla_specs(chunk, dk, dv, n, reverse=True)
  f32 = jnp.float32
  seq = lambda d: jax.ShapeDtypeStruct((b, h, tp, d), f32)
  dq, dk_, dv_, db_col, db_row, ds0 = pl.pallas_call(
      functools.partial(_gla_bwd_kernel, n, chunk, scale),
      grid=(b, h, n),
      in_specs=ins + [states_spec, blk(dv), state],
      out_specs=ins + [state],
      out_shape=[seq(dk), seq(dk), seq(dv), seq(1),
                 jax.ShapeDtypeStruct((b, h, n, 1, chunk), f32),
                 jax.ShapeDtypeStruct((b, h, dk, dv), f32)],
      scratch_shapes=[pltpu.VMEM((dk, dv), f32)],
      compiler_params=_SEMANTICS,
      interpret=interpret,
  )(q, k, v, b_col, b_row.reshape(b, h, n, 1, chunk), states, do, ds_final)
  return dq, dk_, dv_, db_col, db_row.reshape(b_row.shape), ds0


@functools.lru_cache(maxsize=None)
def gla_kernels(interpret):
  return functools.partial(gla_forward, interpret), functools.partial(gla_backward, interpret)


def simple_gla(q, k, v, g, *, scale=None, initial_state=None, chunk_size=DEFAULT_CHUNK,
               interpret=False):
  """Fused: the kernels build each chunk's decays and q k^T themselves; XLA only pads and
  takes the in-chunk cumulative sum of g."""
  b, t, h, dk = q.shape
  dv = v.shape[-1]
  scale = dk ** -0.5 if scale is None else float(scale)
  chunk = tpu_chunk(chunk_size, t)
  s0 = (jnp.zeros((b, h, dk, dv), jnp.float32) if initial_state is None
        else initial_state.astype(jnp.float32))
  o, s_final = state_scan.gla_scan(gla_kernels(interpret), chunk, scale,
                                   *state_scan.gla_inputs(q, k, v, g, chunk), s0)
  return state_scan.from_kernel_layout(o, t, q.dtype), s_final
