"""Pallas kernels of simple GLA and the gated delta rule (TPU Mosaic and GPU Triton, run in
interpret mode on CPU) against the per-token references: outputs, final states and every
gradient (with cotangents on both outputs), plus lowering for the real accelerators and the
argument checks."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

from pallas_kernels import dispatch
from pallas_kernels.export import TRITON_CALL, export_for
from pallas_kernels.delta_rule import api as delta_api
from pallas_kernels.linear_scan import api as scan_api
from pallas_kernels.linear_scan import xla as scan_xla

# Two simulated cores split the "parallel" grid axes (batch, head), so a wrong
# dimension_semantics (the chunk axis carries the state) shows up as a race.
TPU_INTERPRET = pltpu.InterpretParams(detect_races=True, out_of_bounds_reads="raise",
                                      num_cores_or_threads=2)
CHUNK = 16   # the GPU kernels' smallest chunk; T = 21 spans two chunks with a ragged end

# (t, heads, K, V, with initial state, dtype, scale): a ragged multi-chunk sequence, one
# shorter than a chunk (with Mamba-2's scale 1), and a single step (decoding).
CASES = [(21, 2, 8, 16, True, jnp.float32, None), (5, 1, 16, 8, False, jnp.bfloat16, 1.0),
         (1, 3, 8, 8, True, jnp.float32, None)]
TOL = {jnp.float32: 2e-5, jnp.bfloat16: 2e-2}


def _inputs(t, h, dk, dv, dtype, seed=0, b=1):
  ks = jax.random.split(jax.random.PRNGKey(seed), 6)
  q = jax.random.normal(ks[0], (b, t, h, dk))
  k = jax.random.normal(ks[1], (b, t, h, dk))
  k = k / jnp.linalg.norm(k, axis=-1, keepdims=True)          # unit keys, as in Gated DeltaNet
  v = jax.random.normal(ks[2], (b, t, h, dv))
  g = jax.nn.log_sigmoid(jax.random.normal(ks[3], (b, t, h)) + 2.0)   # log decays in (-inf, 0)
  beta = jax.nn.sigmoid(jax.random.normal(ks[4], (b, t, h)))
  s0 = jax.random.normal(ks[5], (b, h, dk, dv))
  return q.astype(dtype), k.astype(dtype), v.astype(dtype), g, beta, s0


def _run(op, impl, q, k, v, g, beta, s0, **kw):
  interpret = TPU_INTERPRET if impl == "pallas_tpu" else None   # pallas_gpu: dispatch's default
  if op == "simple_gla":
    return scan_api.simple_gla(q, k, v, g, initial_state=s0, implementation=impl,
                               interpret=interpret, **kw)
  return delta_api.gated_delta_rule(q, k, v, g, beta, initial_state=s0, implementation=impl,
                                    interpret=interpret, **kw)


def _forward_and_grads(op, impl, case):
  """(o, final state, d q, d k, d v, d g[, d beta][, d s0]) under random cotangents on o and
  on the final state."""
  t, h, dk, dv, with_state, dtype, scale = case
  q, k, v, g, beta, s0 = _inputs(t, h, dk, dv, dtype)
  args = [q, k, v, g] + ([beta] if op == "gated_delta_rule" else []) + ([s0] if with_state else [])

  def f(*a):
    a = list(a)
    q, k, v, g = a[:4]
    beta = a[4] if op == "gated_delta_rule" else None
    s0 = a[-1] if with_state else None
    kw = {} if impl == "reference" else {"chunk_size": CHUNK}
    return _run(op, impl, q, k, v, g, beta, s0, scale=scale, **kw)

  @jax.jit
  def forward_and_vjp(*args):
    (o, s), vjp = jax.vjp(f, *args)
    ct_o = jax.random.normal(jax.random.PRNGKey(7), o.shape).astype(o.dtype)
    ct_s = jax.random.normal(jax.random.PRNGKey(8), s.shape)
    return (o, s) + tuple(vjp((ct_o, ct_s)))

  return forward_and_vjp(*args)


@functools.lru_cache(maxsize=None)
def _reference(op, case):
  return _forward_and_grads(op, "reference", case)


def _close(name, a, b, rel):
  a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
  assert a.shape == b.shape, (name, a.shape, b.shape)
  err = np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-6)
  assert err <= rel, f"{name}: relative error {err:.2e} > {rel:.0e}"


def _assert_no_races(captured_out: str):
  """The TPU interpreter's race flag (for the last kernel: it resets per kernel) and its
  "RACE DETECTED" message (for any kernel). The flag lives in a private module (jax 0.10);
  a move in a later jax fails here loudly rather than passing silently."""
  from jax._src.pallas.mosaic.interpret import interpret_pallas_call as mosaic_interpret
  assert mosaic_interpret.races is not None, "race detector did not run"
  assert not mosaic_interpret.races.races_found, "the TPU interpreter detected a data race"
  assert "RACE DETECTED" not in captured_out


@pytest.mark.parametrize("impl", ["pallas_tpu", "pallas_gpu"])
@pytest.mark.parametrize("op", ["simple_gla", "gated_delta_rule"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"T{c[0]}-H{c[1]}-K{c[2]}-V{c[3]}-"
                         f"{'s0' if c[4] else 'nos0'}-{jnp.dtype(c[5]).name}-scale{c[6]}")
def test_kernel_matches_per_token_reference(impl, op, case, capsys):
  got = _forward_and_grads(op, impl, case)
  want = _reference(op, case)
  names = ["o", "final_state", "dq", "dk", "dv", "dg"]
  names += ["dbeta"] if op == "gated_delta_rule" else []
  names += ["dinitial_state"] if case[4] else []
  assert len(got) == len(want) == len(names)
  for name, a, b in zip(names, got, want):
    assert a.dtype == b.dtype, (name, a.dtype, b.dtype)
    _close(name, a, b, TOL[case[5]])
  if impl == "pallas_tpu":
    _assert_no_races(capsys.readouterr().out)


@pytest.mark.parametrize("op", ["simple_gla", "gated_delta_rule"])
def test_gpu_kernels_split_the_value_columns_across_programs(op):
  """V = 72 pads to 128: two programs per head, each scanning 64 columns of the state; the
  cotangents that sum over the columns (dq, dk, the decays') come out whole."""
  from pallas_kernels.linear_scan import pallas_gpu
  case = (37, 2, 16, 72, True, jnp.float32, None)
  assert pallas_gpu.pow2_at_least_16(case[3]) // pallas_gpu.v_block(128) == 2
  names = ["o", "final_state", "dq", "dk", "dv", "dg"]
  names += ["dbeta"] if op == "gated_delta_rule" else []
  for name, a, b in zip(names + ["dinitial_state"], _forward_and_grads(op, "pallas_gpu", case),
                        _reference(op, case), strict=True):
    _close(name, a, b, TOL[jnp.float32])


@pytest.mark.parametrize("platform", ["tpu", "cuda"])
@pytest.mark.parametrize("op", ["simple_gla", "gated_delta_rule"])
def test_forward_and_backward_lower_for_the_accelerator(op, platform):
  """Compiled (interpret=False) kernels lower from CPU at a realistic shape; Triton's custom
  call needs the export helper (pallas_kernels.export)."""
  impl = "pallas_tpu" if platform == "tpu" else "pallas_gpu"
  b, t, h, d = 1, 1024, 2, 128
  bf16 = lambda *s: jax.ShapeDtypeStruct(s, jnp.bfloat16)
  f32 = lambda *s: jax.ShapeDtypeStruct(s, jnp.float32)
  args = (bf16(b, t, h, d), bf16(b, t, h, d), bf16(b, t, h, d), f32(b, t, h), f32(b, t, h),
          f32(b, h, d, d))

  def f(q, k, v, g, beta, s0):
    if op == "simple_gla":
      return scan_api.simple_gla(q, k, v, g, initial_state=s0, implementation=impl,
                                 interpret=False)
    return delta_api.gated_delta_rule(q, k, v, g, beta, initial_state=s0, implementation=impl,
                                      interpret=False)

  def loss(*a):
    o, s = f(*a)
    return jnp.sum(o.astype(jnp.float32)) + jnp.sum(s)

  kernel_call = "tpu_custom_call" if platform == "tpu" else TRITON_CALL
  for fn, n_kernels in ((f, 1), (jax.grad(loss, argnums=tuple(range(6))), 2)):
    exported = export_for(fn, args, platform)
    assert exported.mlir_module().count(kernel_call) >= n_kernels


def test_auto_on_cpu_is_the_xla_path():
  assert dispatch.resolve("auto") == ("xla", False)
  q, k, v, g, beta, s0 = _inputs(20, 2, 8, 8, jnp.float32)
  auto = scan_api.simple_gla(q, k, v, g, initial_state=s0)
  xla = scan_xla.simple_gla(q, k, v, g, initial_state=s0, chunk_size=scan_xla.DEFAULT_CHUNK)
  np.testing.assert_array_equal(auto[0], xla[0])
  np.testing.assert_array_equal(auto[1], xla[1])


def test_implementations_are_dispatchs():
  assert scan_api.IMPLEMENTATIONS == dispatch.IMPLEMENTATIONS
  assert delta_api.IMPLEMENTATIONS == dispatch.IMPLEMENTATIONS


def _bad(what):
  q, k, v, g, beta, s0 = _inputs(4, 2, 8, 8, jnp.float32)
  kw = {}
  if what == "k":
    k = k.astype(jnp.bfloat16)
  elif what == "v":
    v = v[:, :, :1]
  elif what == "g":
    g = g.astype(jnp.int32)
  elif what == "beta":
    beta = beta[:, :2]
  elif what == "initial_state":
    s0 = s0[..., :4]
  elif what == "implementation":
    kw["implementation"] = "cuda"
  elif what == "chunk_size":
    kw["chunk_size"] = 0
  elif what == "scale":
    kw["scale"] = jnp.float32(0.5) * jnp.ones(())
  return q, k, v, g, beta, s0, kw


@pytest.mark.parametrize("what", ["k", "v", "g", "beta", "initial_state", "implementation",
                                  "chunk_size", "scale"])
def test_bad_input_is_rejected_naming_the_argument(what):
  q, k, v, g, beta, s0, kw = _bad(what)
  with pytest.raises(ValueError, match=rf"\b{what}\b"):
    delta_api.gated_delta_rule(q, k, v, g, beta, initial_state=s0, **kw)
  if what != "beta":
    with pytest.raises(ValueError, match=rf"\b{what}\b"):
      jax.eval_shape(functools.partial(scan_api.simple_gla, initial_state=s0, **kw), q, k, v, g)


def test_pallas_for_another_accelerator_is_rejected(monkeypatch):
  """On a GPU host, compiled pallas_tpu cannot run: a ValueError at trace time."""
  monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
  q, k, v, g, _, _ = _inputs(4, 1, 8, 8, jnp.float32)
  with pytest.raises(ValueError, match="implementation"):
    jax.eval_shape(lambda *a: scan_api.simple_gla(*a, implementation="pallas_tpu"), q, k, v, g)


@pytest.mark.parametrize("impl", ["pallas_tpu", "pallas_gpu"])
def test_delta_rule_with_correlated_keys_at_a_full_chunk(impl):
  """Repeated tokens give nearly parallel keys, where (I + A)^-1 must not be formed from
  cancelling powers of A; also two batch rows (the batch index maps)."""
  b, t, h, d = 2, 64, 1, 32
  ks = jax.random.split(jax.random.PRNGKey(3), 5)
  base = jax.random.normal(ks[0], (d,))
  k = base + 0.05 * jax.random.normal(ks[1], (b, t, h, d))       # pairwise cosine ~0.99
  k = k / jnp.linalg.norm(k, axis=-1, keepdims=True)
  q, v = jax.random.normal(ks[2], (b, t, h, d)), jax.random.normal(ks[3], (b, t, h, d))
  g = jnp.full((b, t, h), -0.01)
  beta = jax.nn.sigmoid(jax.random.normal(ks[4], (b, t, h)) + 2.0)
  want_o, want_s = _run("gated_delta_rule", "reference", q, k, v, g, beta, None)
  got_o, got_s = _run("gated_delta_rule", impl, q, k, v, g, beta, None, chunk_size=64)
  _close("o", got_o, want_o, 1e-4)
  _close("final_state", got_s, want_s, 1e-4)
