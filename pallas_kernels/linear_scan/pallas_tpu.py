"""Pallas TPU (Mosaic) kernels: simple GLA fused (``gla_*``) and the delta rule's state scan
over precomputed WY factors (``forward``/``backward``, used by ``delta_rule.pallas_tpu``;
gamma per chunk, ``[B, H, N, 1, 1]``).

Grid (B, H, N chunks): B and H "parallel", the chunk axis "arbitrary" (sequential on a core)
with the state [K, V] carried in a VMEM scratch. The backwards walk the chunks in reverse
(index maps n -> N-1-n) carrying dS, and read the per-chunk states the forward saved.
The per-chunk math is ``state_scan``'s, shared with the GPU kernels; one forward and one
backward kernel body (``_scan_fwd_kernel``, ``_scan_bwd_kernel``) serve both scans, which
differ only in that per-chunk math and their operands.
"""

import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from pallas_kernels import costs
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
  # gamma per chunk, [B, H, N, 1, 1]: a per-token [B, H, T, 1] float32 is padded to 128 lanes
  # in HBM (as large as a [T, 128] factor), for one number per chunk.
  gam = pl.BlockSpec((None, None, None, 1, 1), lambda b, h, i: (*at(b, h, i), 0))
  return [blk(dk), blk(dk), blk(dk), blk(dv), blk(chunk), gam], blk


def _scan_fwd_kernel(n, chunk_math, *refs):
  """The forward of both scans: S from s0 (chunk 0) or the scratch, save it, one chunk of
  ``chunk_math(*input refs, S) -> (o, S')``, the final state at the last chunk."""
  *in_refs, s0_ref, o_ref, states_ref, sfin_ref, s_scr = refs
  i = pl.program_id(2)

  @pl.when(i == 0)
  def _():
    s_scr[...] = s0_ref[...]

  s = s_scr[...]
  states_ref[...] = s
  o, s_new = chunk_math(*in_refs, s)
  o_ref[...] = o.astype(o_ref.dtype)
  s_scr[...] = s_new

  @pl.when(i == n - 1)
  def _():
    sfin_ref[...] = s_new


def _scan_bwd_kernel(n, n_in, chunk_math, *refs):
  """The backward of both scans, chunks in reverse: dS from the final state's cotangent
  (first step) or the scratch, ``chunk_math(*input refs, dS') -> (*cotangents, dS)`` with one
  cotangent per output ref but the last, dS0 at the last step."""
  in_refs, out_refs = refs[:n_in], refs[n_in:-2]
  ds0_ref, ds_scr = refs[-2:]
  i = pl.program_id(2)

  @pl.when(i == 0)
  def _():
    ds_scr[...] = in_refs[-1][...]

  *cts, ds = chunk_math(*in_refs[:-1], ds_scr[...])
  for ref, ct in zip(out_refs, cts):
    ref[...] = jnp.broadcast_to(ct, ref.shape)
  ds_scr[...] = ds

  @pl.when(i == n - 1)
  def _():
    ds0_ref[...] = ds


def _call(kernel, name, grid, in_specs, out_specs, out_shape, dk, dv, cost, interpret):
  return pl.pallas_call(
      kernel, grid=grid, in_specs=in_specs, out_specs=out_specs, out_shape=out_shape,
      scratch_shapes=[pltpu.VMEM((dk, dv), jnp.float32)], compiler_params=_SEMANTICS,
      cost_estimate=cost, name=name, interpret=interpret)


def _state_chunk_forward(qd, kd, w, ut, aqk, gam, s):
  return state_scan.chunk_forward(qd[...], kd[...], w[...], ut[...], aqk[...], gam[0:1, :], s)


def _state_chunk_backward(qd, kd, w, ut, aqk, gam, states, do, ds):
  return state_scan.chunk_backward(qd[...], kd[...], w[...], ut[...], aqk[...], gam[0:1, :],
                                   states[...], do[...].astype(jnp.float32), ds)


def forward(interpret, o_dtype, qd, kd, w, ut, aqk, gam, s0, chunk):
  """``o`` in ``o_dtype``: the caller's output dtype (bf16 halves it; its cotangent ``do``
  then comes back in it too, and is read as float32)."""
  b, h, tp, dk = qd.shape
  dv, n = ut.shape[-1], tp // chunk
  specs, blk = _specs(chunk, dk, dv, n)
  state_spec = pl.BlockSpec((None, None, dk, dv), lambda b, h, i: (b, h, 0, 0))
  f32 = jnp.float32
  out_shape = [jax.ShapeDtypeStruct((b, h, tp, dv), o_dtype),
               jax.ShapeDtypeStruct((b, h, n * dk, dv), f32),
               jax.ShapeDtypeStruct((b, h, dk, dv), f32)]
  ins = (qd, kd, w, ut, aqk, gam, s0)
  cost = costs.estimate(costs.scan_flops(b, h, tp, chunk, dk, dv, True), 0, ins, out_shape)
  return _call(functools.partial(_scan_fwd_kernel, n, _state_chunk_forward), "scan_fwd_tpu",
               (b, h, n), specs + [state_spec],
               [blk(dv), pl.BlockSpec((None, None, dk, dv), lambda b, h, i: (b, h, i, 0)),
                state_spec], out_shape, dk, dv, cost, interpret)(*ins)


def backward(interpret, qd, kd, w, ut, aqk, gam, states, do, ds_final, chunk):
  b, h, tp, dk = qd.shape
  dv, n = ut.shape[-1], tp // chunk
  specs, blk = _specs(chunk, dk, dv, n, reverse=True)
  state_at = pl.BlockSpec((None, None, dk, dv), lambda b, h, i: (b, h, n - 1 - i, 0))
  final = pl.BlockSpec((None, None, dk, dv), lambda b, h, i: (b, h, 0, 0))
  f32 = jnp.float32
  seq = lambda d: jax.ShapeDtypeStruct((b, h, tp, d), f32)
  outs = [seq(dk), seq(dk), seq(dk), seq(dv), seq(chunk), jax.ShapeDtypeStruct(gam.shape, f32),
          jax.ShapeDtypeStruct((b, h, dk, dv), f32)]
  ins = (qd, kd, w, ut, aqk, gam, states, do, ds_final)
  cost = costs.estimate(2 * costs.scan_flops(b, h, tp, chunk, dk, dv, True), 0, ins, outs)
  return tuple(_call(functools.partial(_scan_bwd_kernel, n, len(ins), _state_chunk_backward),
                     "scan_bwd_tpu", (b, h, n), specs + [state_at, blk(dv), final],
                     specs + [final], outs, dk, dv, cost, interpret)(*ins))


@functools.lru_cache(maxsize=None)
def kernels(interpret, o_dtype=jnp.float32):
  """(forward, backward) for one interpret setting and output dtype; cached so that
  custom_vjp's static argument is the same object on every call (jit cache hits)."""
  return functools.partial(forward, interpret, jnp.dtype(o_dtype)), functools.partial(
      backward, interpret)


def _gla_specs(chunk, dk, dv, n, reverse=False):
  at = (lambda b, h, i: (b, h, n - 1 - i, 0)) if reverse else (lambda b, h, i: (b, h, i, 0))
  blk = lambda d: pl.BlockSpec((None, None, chunk, d), at)
  row_at = ((lambda b, h, i: (b, h, n - 1 - i, 0, 0)) if reverse
            else (lambda b, h, i: (b, h, i, 0, 0)))
  row = pl.BlockSpec((None, None, None, 1, chunk), row_at)
  state = pl.BlockSpec((None, None, dk, dv), lambda b, h, i: (b, h, 0, 0))
  states = pl.BlockSpec((None, None, dk, dv), lambda b, h, i: (b, h, at(b, h, i)[2], 0))
  return [blk(dk), blk(dk), blk(dv), blk(1), row], state, states, blk


def _gla_transcendentals(b, h, tp, chunk):
  return b * h * (tp // chunk) * (chunk * chunk + 2 * chunk + 1)


def gla_forward(interpret, q, k, v, b_col, b_row, s0, chunk, scale):
  b, h, tp, dk = q.shape
  dv, n = v.shape[-1], tp // chunk
  ins, state, states, blk = _gla_specs(chunk, dk, dv, n)
  f32 = jnp.float32
  out_shape = [jax.ShapeDtypeStruct((b, h, tp, dv), f32),
               jax.ShapeDtypeStruct((b, h, n * dk, dv), f32),
               jax.ShapeDtypeStruct((b, h, dk, dv), f32)]
  args = (q, k, v, b_col, b_row.reshape(b, h, n, 1, chunk), s0)
  cost = costs.estimate(costs.scan_flops(b, h, tp, chunk, dk, dv, False),
                        _gla_transcendentals(b, h, tp, chunk), args, out_shape)
  math = lambda q, k, v, bc, br, s: state_scan.gla_chunk_forward(
      q[...], k[...], v[...], bc[...], br[...], bc[chunk - 1:chunk, :], s, scale)
  return _call(functools.partial(_scan_fwd_kernel, n, math), "gla_fwd_tpu", (b, h, n),
               ins + [state], [blk(dv), states, state], out_shape, dk, dv, cost,
               interpret)(*args)


def gla_backward(interpret, q, k, v, b_col, b_row, states, do, ds_final, chunk, scale):
  b, h, tp, dk = q.shape
  dv, n = v.shape[-1], tp // chunk
  ins, state, states_spec, blk = _gla_specs(chunk, dk, dv, n, reverse=True)
  f32 = jnp.float32
  seq = lambda d: jax.ShapeDtypeStruct((b, h, tp, d), f32)
  outs = [seq(dk), seq(dk), seq(dv), seq(1), jax.ShapeDtypeStruct((b, h, n, 1, chunk), f32),
          jax.ShapeDtypeStruct((b, h, dk, dv), f32)]
  args = (q, k, v, b_col, b_row.reshape(b, h, n, 1, chunk), states, do, ds_final)
  cost = costs.estimate(2 * costs.scan_flops(b, h, tp, chunk, dk, dv, False),
                        _gla_transcendentals(b, h, tp, chunk), args, outs)
  math = lambda q, k, v, bc, br, st, do, ds: state_scan.gla_chunk_backward(
      q[...], k[...], v[...], bc[...], br[...], bc[chunk - 1:chunk, :], st[...], do[...], ds,
      scale)
  dq, dk_, dv_, db_col, db_row, ds0 = _call(
      functools.partial(_scan_bwd_kernel, n, len(args), math), "gla_bwd_tpu", (b, h, n),
      ins + [states_spec, blk(dv), state], ins + [state], outs, dk, dv, cost,
      interpret)(*args)
  return dq, dk_, dv_, db_col, db_row.reshape(b_row.shape), ds0


@functools.lru_cache(maxsize=None)
def gla_kernels(interpret):
  return functools.partial(gla_forward, interpret), functools.partial(gla_backward, interpret)


def simple_gla(q, k, v, g, *, scale=None, initial_state=None, chunk_size=DEFAULT_CHUNK,
               interpret=False):
  """Fused: the kernels build each chunk's decays and q k^T themselves; XLA only pads and
  takes the in-chunk cumulative sum of g."""
  t, _, _, scale, s0 = state_scan.entry_shapes(q, v, scale, initial_state)
  chunk = tpu_chunk(chunk_size, t)
  o, s_final = state_scan.gla_scan(gla_kernels(interpret), chunk, float(scale),
                                   *state_scan.gla_inputs(q, k, v, g, chunk), s0)
  return state_scan.from_kernel_layout(o, t, q.dtype), s_final
