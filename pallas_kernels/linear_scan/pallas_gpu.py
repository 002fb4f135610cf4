"""Pallas GPU (Triton lowering) kernels: simple GLA fused (``gla_*``) and the delta rule's
state scan over precomputed WY factors (``forward``/``backward``, used by
``delta_rule.pallas_gpu``).

Grid (B, H, V / V_BLOCK): one program per head and block of the state's value columns holds
its [K, V_BLOCK] slice of the state and walks the chunks with a ``fori_loop`` (the backwards
walk them in reverse carrying dS, reading the per-chunk states the forward saved). The
recurrence never mixes value columns, so the blocks are independent: each writes its columns
of o, the states and dv, and its share of the cotangents that sum over the columns (dq, dk,
dW, dAqk, the decays'), which XLA adds up after the call. The whole [128, 128] float32 state
in one program of 4 warps spilled registers on sm_90a and gave a GPU only B * H programs;
64 columns in 8 warps spill less with twice the programs, for more gradient temporaries
(the shares before they are summed). Figures: linear_scan/README.md, from ``python -m
hybrid_jax.bench.kernels --gpu-spills`` and ``--memory h100:1``; not yet timed on a GPU.

Triton wants power-of-2 tensors and matmul dims >= 16, so the wrappers zero-pad K, V and the
chunk to such sizes, which leaves the recurrence unchanged. The per-chunk math is
``state_scan``'s, shared with the TPU kernels; one forward and one
backward kernel body serve both scans (``_scan_fwd_kernel``, ``_scan_bwd_kernel``).
"""

import contextlib
import functools

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltr

from pallas_kernels import costs
from pallas_kernels.linear_scan import state_scan

DEFAULT_CHUNK = 64
V_BLOCK = 64        # value columns per program (bench --gpu-spills; tests/test_pallas_compile.py)
_PARAMS = pltr.CompilerParams(num_warps=8, num_stages=1)   # 8: fewer spills (bench)


def pow2_at_least_16(n):
  return max(16, 1 << (max(1, n) - 1).bit_length())


def gpu_chunk(chunk_size, t):
  return pow2_at_least_16(min(chunk_size, t))


def v_block(dv_padded: int) -> int:
  """Value columns per program (all of them when ``V_BLOCK`` is None); a power of 2, so it
  divides the padded V."""
  bv = dv_padded if V_BLOCK is None else min(dv_padded, V_BLOCK)
  if dv_padded % bv:
    raise ValueError(f"V_BLOCK must be a power of 2 (it must divide V = {dv_padded}); got {bv}")
  return bv


@contextlib.contextmanager
def layout(v_block_columns: int | None, num_warps: int):
  """Kernels traced inside use this value-column block (None: the whole state in one
  program) and warp count: the device check times the layout before the split (whole state,
  4 warps) against the default, which no GPU has timed yet."""
  global V_BLOCK, _PARAMS
  saved = V_BLOCK, _PARAMS
  V_BLOCK, _PARAMS = v_block_columns, pltr.CompilerParams(num_warps=num_warps, num_stages=1)
  try:
    yield
  finally:
    V_BLOCK, _PARAMS = saved


def _whole(rows, cols):
  """The whole [rows, cols] slab of one (b, h), whichever value block."""
  return pl.BlockSpec((None, None, rows, cols), lambda b, h, j: (b, h, 0, 0))


def _cols(rows, cols):
  """Value block j's [rows, cols] columns of one (b, h)."""
  return pl.BlockSpec((None, None, rows, cols), lambda b, h, j: (b, h, 0, j))


def _share(rows, cols):
  """Value block j's own [rows, cols] slab of a cotangent that sums over the blocks
  (layout [B, V blocks, H, rows, cols], batch first like every other operand, so that a
  sharded batch stays the leading axis; ``_summed`` adds the blocks)."""
  return pl.BlockSpec((None, None, None, rows, cols), lambda b, h, j: (b, j, h, 0, 0))


def _summed(x):
  return x.sum(axis=1)


def _scan_fwd_kernel(n, chunk, chunk_math, *refs):
  """The forward of both scans: one program walks the chunks, saving each chunk's starting
  state; ``chunk_math(i, rows, *input refs, S) -> (o, S')``."""
  *in_refs, s0_ref, o_ref, states_ref, sfin_ref = refs
  dk = s0_ref.shape[0]

  def step(i, s):
    rows = pl.ds(i * chunk, chunk)
    states_ref[pl.ds(i * dk, dk), :] = s
    o, s_new = chunk_math(i, rows, *in_refs, s)
    o_ref[rows, :] = o
    return s_new

  sfin_ref[...] = jax.lax.fori_loop(0, n, step, s0_ref[...])


def _scan_bwd_kernel(n, chunk, n_in, chunk_math, store, *refs):
  """The backward of both scans, chunks in reverse carrying dS:
  ``chunk_math(i, rows, *input refs but the last, dS') -> (*cotangents, dS)``, written by
  ``store(i, rows, output refs, cotangents)``."""
  in_refs, out_refs, ds0_ref = refs[:n_in], refs[n_in:-1], refs[-1]

  def step(j, ds_next):
    i = n - 1 - j
    rows = pl.ds(i * chunk, chunk)
    *cts, ds = chunk_math(i, rows, *in_refs[:-1], ds_next)
    store(i, rows, out_refs, cts)
    return ds

  ds0_ref[...] = jax.lax.fori_loop(0, n, step, in_refs[-1][...])


def _call(kernel, name, b, h, nv, in_specs, out_specs, out_shape, cost, interpret):
  return pl.pallas_call(kernel, grid=(b, h, nv), in_specs=in_specs, out_specs=out_specs,
                        out_shape=out_shape, compiler_params=_PARAMS, cost_estimate=cost,
                        name=name, interpret=interpret)


def _state_chunk_forward(chunk, i, rows, qd, kd, w, ut, aqk, gam, s):
  return state_scan.chunk_forward(qd[rows, :], kd[rows, :], w[rows, :], ut[rows, :],
                                  aqk[rows, :], gam[pl.ds(i * chunk, 1), :], s)


def _state_chunk_backward(chunk, i, rows, qd, kd, w, ut, aqk, gam, states, do, ds_next):
  dk = qd.shape[-1]
  return state_scan.chunk_backward(
      qd[rows, :], kd[rows, :], w[rows, :], ut[rows, :], aqk[rows, :],
      gam[pl.ds(i * chunk, 1), :], states[pl.ds(i * dk, dk), :], do[rows, :], ds_next)


def _store_rows(chunk, i, rows, refs, cts):
  for ref, ct in zip(refs, cts):
    ref[rows, :] = jnp.broadcast_to(ct, (chunk, ref.shape[-1]))


def forward(interpret, qd, kd, w, ut, aqk, gam, s0, chunk):
  b, h, tp, dk = qd.shape
  dv, n = ut.shape[-1], tp // chunk
  bv = v_block(dv)
  f32 = jnp.float32
  ins = [_whole(tp, dk)] * 3 + [_cols(tp, bv), _whole(tp, chunk), _whole(tp, 1), _cols(dk, bv)]
  out_shape = [jax.ShapeDtypeStruct((b, h, tp, dv), f32),
               jax.ShapeDtypeStruct((b, h, n * dk, dv), f32),
               jax.ShapeDtypeStruct((b, h, dk, dv), f32)]
  args = (qd, kd, w, ut, aqk, gam, s0)
  cost = costs.estimate(costs.scan_flops(b, h, tp, chunk, dk, dv, True), 0, args, out_shape)
  math = functools.partial(_state_chunk_forward, chunk)
  return _call(functools.partial(_scan_fwd_kernel, n, chunk, math), "scan_fwd_gpu", b, h,
               dv // bv, ins, [_cols(tp, bv), _cols(n * dk, bv), _cols(dk, bv)], out_shape,
               cost, interpret)(*args)


def backward(interpret, qd, kd, w, ut, aqk, gam, states, do, ds_final, chunk):
  b, h, tp, dk = qd.shape
  dv, n = ut.shape[-1], tp // chunk
  bv = v_block(dv)
  nv = dv // bv
  f32 = jnp.float32
  ins = [_whole(tp, dk)] * 3 + [_cols(tp, bv), _whole(tp, chunk), _whole(tp, 1),
                                _cols(n * dk, bv), _cols(tp, bv), _cols(dk, bv)]
  share = lambda d: jax.ShapeDtypeStruct((b, nv, h, tp, d), f32)
  outs = [share(dk)] * 3 + [jax.ShapeDtypeStruct((b, h, tp, dv), f32), share(chunk), share(1),
                            jax.ShapeDtypeStruct((b, h, dk, dv), f32)]
  out_specs = [_share(tp, dk)] * 3 + [_cols(tp, bv), _share(tp, chunk), _share(tp, 1),
                                      _cols(dk, bv)]
  args = (qd, kd, w, ut, aqk, gam, states, do, ds_final)
  cost = costs.estimate(2 * costs.scan_flops(b, h, tp, chunk, dk, dv, True), 0, args, outs)
  kernel = functools.partial(_scan_bwd_kernel, n, chunk, len(args),
                             functools.partial(_state_chunk_backward, chunk),
                             functools.partial(_store_rows, chunk))
  dqd, dkd, dw, dut, daqk, dgam, ds0 = _call(kernel, "scan_bwd_gpu", b, h, nv, ins, out_specs,
                                             outs, cost, interpret)(*args)
  return (_summed(dqd), _summed(dkd), _summed(dw), dut, _summed(daqk), _summed(dgam), ds0)


@functools.lru_cache(maxsize=None)
def kernels(interpret):
  """(forward, backward) for one interpret setting; cached so that custom_vjp's static
  argument is the same object on every call (jit cache hits)."""
  return functools.partial(forward, interpret), functools.partial(backward, interpret)


def last_b(bc_ref, i, chunk):
  """[1, 1]: chunk i's total log decay, read from memory (Triton cannot slice a value)."""
  return bc_ref[pl.ds(i * chunk + chunk - 1, 1), :]


def _gla_chunk_forward(chunk, scale, i, rows, q, k, v, bc, br, s):
  return state_scan.gla_chunk_forward(q[rows, :], k[rows, :], v[rows, :], bc[rows, :],
                                      br[pl.ds(i, 1), :], last_b(bc, i, chunk), s, scale)


def _gla_chunk_backward(chunk, scale, i, rows, q, k, v, bc, br, states, do, ds_next):
  dk = q.shape[-1]
  return state_scan.gla_chunk_backward(
      q[rows, :], k[rows, :], v[rows, :], bc[rows, :], br[pl.ds(i, 1), :], last_b(bc, i, chunk),
      states[pl.ds(i * dk, dk), :], do[rows, :], ds_next, scale)


def _gla_store(chunk, i, rows, refs, cts):
  """dq, dk, dv, db_col by rows; db_row is one row per chunk."""
  _store_rows(chunk, i, rows, refs[:4], cts[:4])
  refs[4][pl.ds(i, 1), :] = cts[4]


def _gla_transcendentals(b, h, tp, chunk):
  return b * h * (tp // chunk) * (chunk * chunk + 2 * chunk + 1)


def gla_forward(interpret, q, k, v, b_col, b_row, s0, chunk, scale):
  b, h, tp, dk = q.shape
  dv, n = v.shape[-1], tp // chunk
  bv = v_block(dv)
  f32 = jnp.float32
  out_shape = [jax.ShapeDtypeStruct((b, h, tp, dv), f32),
               jax.ShapeDtypeStruct((b, h, n * dk, dv), f32),
               jax.ShapeDtypeStruct((b, h, dk, dv), f32)]
  args = (q, k, v, b_col, b_row, s0)
  cost = costs.estimate(costs.scan_flops(b, h, tp, chunk, dk, dv, False),
                        _gla_transcendentals(b, h, tp, chunk), args, out_shape)
  math = functools.partial(_gla_chunk_forward, chunk, scale)
  return _call(functools.partial(_scan_fwd_kernel, n, chunk, math), "gla_fwd_gpu", b, h,
               dv // bv, [_whole(tp, dk), _whole(tp, dk), _cols(tp, bv), _whole(tp, 1),
                          _whole(n, chunk), _cols(dk, bv)],
               [_cols(tp, bv), _cols(n * dk, bv), _cols(dk, bv)], out_shape, cost,
               interpret)(*args)


def gla_backward(interpret, q, k, v, b_col, b_row, states, do, ds_final, chunk, scale):
  b, h, tp, dk = q.shape
  dv, n = v.shape[-1], tp // chunk
  bv = v_block(dv)
  nv = dv // bv
  f32 = jnp.float32
  ins = [_whole(tp, dk), _whole(tp, dk), _cols(tp, bv), _whole(tp, 1), _whole(n, chunk),
         _cols(n * dk, bv), _cols(tp, bv), _cols(dk, bv)]
  share = lambda rows, d: jax.ShapeDtypeStruct((b, nv, h, rows, d), f32)
  outs = [share(tp, dk), share(tp, dk), jax.ShapeDtypeStruct((b, h, tp, dv), f32),
          share(tp, 1), share(n, chunk), jax.ShapeDtypeStruct((b, h, dk, dv), f32)]
  out_specs = [_share(tp, dk), _share(tp, dk), _cols(tp, bv), _share(tp, 1), _share(n, chunk),
               _cols(dk, bv)]
  args = (q, k, v, b_col, b_row, states, do, ds_final)
  cost = costs.estimate(2 * costs.scan_flops(b, h, tp, chunk, dk, dv, False),
                        _gla_transcendentals(b, h, tp, chunk), args, outs)
  kernel = functools.partial(_scan_bwd_kernel, n, chunk, len(args),
                             functools.partial(_gla_chunk_backward, chunk, scale),
                             functools.partial(_gla_store, chunk))
  dq, dk_, dv_, db_col, db_row, ds0 = _call(kernel, "gla_bwd_gpu", b, h, nv, ins, out_specs,
                                            outs, cost, interpret)(*args)
  return _summed(dq), _summed(dk_), dv_, _summed(db_col), _summed(db_row), ds0


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
  t, dk, dv, scale, s0 = state_scan.entry_shapes(q, v, scale, initial_state)
  chunk = gpu_chunk(chunk_size, t)
  kp, vp = pow2_at_least_16(dk), pow2_at_least_16(dv)
  q, k, v, b_col, b_row = state_scan.gla_inputs(q_in := q, k, v, g, chunk)
  o, s_final = state_scan.gla_scan(gla_kernels(interpret), chunk, float(scale), pad_last(q, kp),
                                   pad_last(k, kp), pad_last(v, vp), b_col, b_row,
                                   pad_state(s0, kp, vp))
  return state_scan.from_kernel_layout(o[..., :dv], t, q_in.dtype), s_final[:, :, :dk, :dv]
