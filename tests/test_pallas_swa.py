"""Pallas SWA kernels (TPU Mosaic, GPU Triton) against dense masked attention.

On CPU the kernels run in Pallas interpret mode (TPU: with the race detector and
out-of-bounds reads raising); compiled code is checked by lowering for TPU and CUDA with
``jax.export`` (no accelerator needed).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from pallas_kernels import dispatch
from pallas_kernels.export import TRITON_CALL, export_for
from pallas_kernels.swa import api, pallas_gpu, pallas_tpu, reference

# Two simulated cores split the "parallel" grid axes, so writes of one output block from
# two of them (a wrong dimension_semantics) show up as races.
TPU_INTERPRET = pltpu.InterpretParams(detect_races=True, out_of_bounds_reads="raise",
                                      num_cores_or_threads=2)


def _qkv(b, t, h, kv, d, dtype=jnp.float32, seed=0):
  ks = jax.random.split(jax.random.PRNGKey(seed), 3)
  return (jax.random.normal(ks[0], (b, t, h, d)).astype(dtype),
          jax.random.normal(ks[1], (b, t, kv, d)).astype(dtype),
          jax.random.normal(ks[2], (b, t, kv, d)).astype(dtype))


def _races_found() -> bool:
  """The TPU interpreter's race flag for the last kernel it ran (it resets per kernel; the
  detector also prints "RACE DETECTED" for any kernel). It lives in a private module
  (jax 0.10); a move in a later jax fails here loudly rather than silently."""
  from jax._src.pallas.mosaic.interpret import interpret_pallas_call as mosaic_interpret
  assert mosaic_interpret.races is not None, "race detector did not run"
  return mosaic_interpret.races.races_found


def _output_and_grads(f, q, k, v):
  """f(q, k, v) and its vjp against a fixed random cotangent, in one jit."""
  @jax.jit
  def run(q, k, v):
    o, vjp = jax.vjp(f, q, k, v)
    ct = jax.random.normal(jax.random.PRNGKey(7), o.shape).astype(o.dtype)
    return o, vjp(ct)
  return run(q, k, v)


# (T, window, H, H_kv, TPU block, dtype): each row covers several edge cases at once, so
# that the interpreted kernels (slow to compile) run few times. The GPU runs double T, w and
# the block (16 is its smallest). w > T is clamped to T in the wrapper, so it also covers
# w = T. block None: the default (short T: TPU all of T rounded up to 8, GPU next power of 2).
CASES = [
    pytest.param(20, 5, 4, 2, 8, jnp.float32, id="T%block,w-not-dividing-block,gqa2"),
    pytest.param(5, 1, 2, 2, None, jnp.float32, id="T<block,w=1,mha,default-block"),
    pytest.param(19, 11, 3, 1, 8, jnp.float32, id="band-of-3-blocks,T%block,mqa3"),
    pytest.param(13, 40, 4, 2, 8, jnp.bfloat16, id="w>T,T%block,gqa2,bf16"),
]
TOL = {jnp.float32: dict(out=1e-5, grad=2e-5), jnp.bfloat16: dict(out=3e-2, grad=6e-2)}


def _check_against_reference(implementation, block, interpret, t, window, h, kv, dtype):
  q, k, v = _qkv(2, t, h, kv, 8, dtype)   # two batch rows: the batch index maps
  kernel = lambda q, k, v: api.sliding_window_attention(
      q, k, v, window=window, implementation=implementation, block_size=block,
      interpret=interpret)
  # The oracle runs in float32 on the same (possibly bf16-rounded) inputs.
  dense = lambda q, k, v: reference.sliding_window_attention(
      q.astype(jnp.float32), k.astype(jnp.float32), v.astype(jnp.float32), window=window)
  o, grads = _output_and_grads(kernel, q, k, v)
  o_ref, grads_ref = _output_and_grads(dense, q, k, v)
  tol = TOL[dtype]
  assert o.dtype == dtype and o.shape == q.shape
  f32 = lambda x: np.asarray(x.astype(jnp.float32))
  scale = lambda x: max(1.0, float(np.abs(f32(x)).max()))
  np.testing.assert_allclose(f32(o), f32(o_ref), atol=tol["out"], rtol=tol["out"])
  for name, g, g_ref in zip("qkv", grads, grads_ref):
    assert g.dtype == dtype, name
    np.testing.assert_allclose(f32(g), f32(g_ref), atol=tol["grad"] * scale(g_ref),
                               rtol=tol["grad"], err_msg=f"d{name}")


@pytest.mark.parametrize("t,window,h,kv,block,dtype", CASES)
def test_pallas_tpu_interpret_matches_dense(t, window, h, kv, block, dtype, capsys):
  _check_against_reference("pallas_tpu", block, TPU_INTERPRET, t, window, h, kv, dtype)
  assert "RACE DETECTED" not in capsys.readouterr().out
  assert not _races_found()


@pytest.mark.parametrize("t,window,h,kv,block,dtype", CASES)
def test_pallas_gpu_interpret_matches_dense(t, window, h, kv, block, dtype):
  _check_against_reference("pallas_gpu", block and 2 * block, True, 2 * t, 2 * window, h, kv,
                           dtype)


# Each phase on its own block: T is padded to a multiple of all three, and each phase's
# band (its blocks back) follows its own block, so a phase reading another's geometry fails.
PHASES = api.BlockSizes(fwd=16, dq=8, dkv=24)


def test_pallas_tpu_phases_with_their_own_blocks_match_dense(capsys):
  _check_against_reference("pallas_tpu", PHASES, TPU_INTERPRET, 37, 13, 4, 2, jnp.float32)
  assert not _races_found()


def test_pallas_gpu_phases_with_their_own_blocks_match_dense():
  _check_against_reference("pallas_gpu", api.BlockSizes(fwd=32, dq=16, dkv=64), True, 70, 21,
                           4, 2, jnp.float32)


def test_block_sizes_reach_the_kernels_from_the_model_config():
  from conftest import tiny_config
  from hybrid_jax.configs import ConfigError
  from hybrid_jax.model.config import ModelConfig
  from hybrid_jax.resolve import resolve
  c = tiny_config("S")
  c.model.swa_block_sizes = (16, 8, 24)
  m = ModelConfig.from_config(resolve(c).model)
  from hybrid_jax.model.attention import Attention
  from flax import nnx
  layer = Attention(m, local_heads=m.n_heads, pos="rope", rngs=nnx.Rngs(0))
  assert layer.blocks == api.BlockSizes(16, 8, 24)
  c.model.swa_block_sizes = (16, 8)
  with pytest.raises(ConfigError, match=r"^config\.model\.swa_block_sizes:"):
    resolve(c)


def _eqns(jaxpr):
  """All equations of a jaxpr, including those nested in sub-jaxprs (custom_vjp, pjit)."""
  for eqn in jaxpr.eqns:
    yield eqn
    for param in eqn.params.values():
      sub = getattr(param, "jaxpr", param)
      if isinstance(sub, jax.extend.core.Jaxpr):
        yield from _eqns(sub)


def test_tpu_grid_visits_only_the_band():
  """Block skipping: the kv grid axis has the band's length (w / block + 1), not T / block."""
  q, k, v = _qkv(1, 1024, 2, 1, 128, jnp.bfloat16)
  f = lambda q, k, v: pallas_tpu.sliding_window_attention(q, k, v, window=256)
  grids = [eqn.params["grid_mapping"].grid for eqn in _eqns(jax.make_jaxpr(f)(q, k, v).jaxpr)
           if eqn.primitive.name == "pallas_call"]
  assert grids == [(1, 2, 1024 // 128, 256 // 128 + 1)]


def _export(f, args, platform):
  return export_for(f, args, platform)


@pytest.mark.parametrize("implementation,platform,call,d", [
    ("pallas_tpu", "tpu", "tpu_custom_call", 128), ("pallas_tpu", "tpu", "tpu_custom_call", 64),
    ("pallas_gpu", "cuda", TRITON_CALL, 128), ("pallas_gpu", "cuda", TRITON_CALL, 64)])
def test_compiled_kernels_lower_forward_and_backward(implementation, platform, call, d):
  """interpret=False from CPU: the Mosaic / Triton lowering of forward and backward at
  realistic sizes with the default blocks (TPU-legal (8, 128) tiling, powers of 2)."""
  s = lambda h: jax.ShapeDtypeStruct((2, 1024, h, d), jnp.bfloat16)
  args = (s(8), s(2), s(2))
  f = lambda q, k, v: api.sliding_window_attention(
      q, k, v, window=256, implementation=implementation, interpret=False)
  loss = lambda q, k, v: jnp.sum(f(q, k, v).astype(jnp.float32))
  forward = _export(f, args, platform).mlir_module()
  backward = _export(jax.grad(loss, argnums=(0, 1, 2)), args, platform).mlir_module()
  assert forward.count(call) == 1                  # one forward kernel
  assert backward.count(call) == 3                 # forward, dQ, dK/dV


def test_auto_on_cpu_is_the_xla_path():
  assert dispatch.resolve("auto") == ("xla", False)
  q, k, v = _qkv(1, 16, 2, 1, 8)
  f = lambda q, k, v: api.sliding_window_attention(q, k, v, window=4)
  jaxpr = str(jax.make_jaxpr(f)(q, k, v))
  assert "pallas_call" not in jaxpr
  jaxpr = str(jax.make_jaxpr(lambda q, k, v: api.sliding_window_attention(
      q, k, v, window=4, implementation="pallas_gpu"))(q, k, v))
  assert "pallas_call" in jaxpr                    # and the check above can fail


def test_api_implementations_are_dispatchs():
  assert api.IMPLEMENTATIONS == dispatch.IMPLEMENTATIONS


def _shapes(b=1, t=16, h=4, kv=2, d=8, dtype=jnp.float32, **over):
  shapes = dict(q=(b, t, h, d), k=(b, t, kv, d), v=(b, t, kv, d)) | over
  return [jax.ShapeDtypeStruct(shapes[n], dtype) for n in "qkv"]


@pytest.mark.parametrize("args,kwargs,match", [
    (_shapes(), dict(window=0), "window"),
    (_shapes(), dict(window=2.5), "window"),
    (_shapes(h=4, kv=3), dict(window=4), "kv heads"),
    (_shapes(k=(1, 12, 2, 8)), dict(window=4), "k and v"),
    (_shapes(v=(1, 16, 2, 4)), dict(window=4), "k and v"),
    (_shapes()[:2] + [jax.ShapeDtypeStruct((1, 16, 2, 8), jnp.bfloat16)], dict(window=4), "dtype"),
    (_shapes(), dict(window=4, implementation="cuda-magic"), "implementation"),
    (_shapes(), dict(window=4, implementation="pallas_tpu", block_size=12), "block_size"),
    (_shapes(), dict(window=4, implementation="pallas_gpu", block_size=24), "block_size"),
])
def test_bad_input_is_rejected_at_trace_time(args, kwargs, match):
  """eval_shape traces without computing: the error comes before any compute."""
  with pytest.raises(ValueError, match=match):
    jax.eval_shape(lambda q, k, v: api.sliding_window_attention(q, k, v, **kwargs), *args)


def test_kernel_for_another_accelerator_is_rejected(monkeypatch):
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  with pytest.raises(ValueError, match="implementation='pallas_tpu'"):
    jax.eval_shape(lambda q, k, v: api.sliding_window_attention(
        q, k, v, window=4, implementation="pallas_tpu"), *_shapes())
