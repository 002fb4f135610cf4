"""Public entry point for simple GLA; models call only this."""

import numbers

import jax.numpy as jnp

from pallas_kernels import dispatch
from pallas_kernels.linear_scan import pallas_gpu, pallas_tpu, reference, xla

IMPLEMENTATIONS = dispatch.IMPLEMENTATIONS
DEFAULT_CHUNK = {"xla": xla.DEFAULT_CHUNK, "pallas_tpu": pallas_tpu.DEFAULT_CHUNK,
                 "pallas_gpu": pallas_gpu.DEFAULT_CHUNK}


def check_shapes(q, k, v, g, initial_state, beta=None):
  if q.ndim != 4 or k.shape != q.shape or v.ndim != 4 or v.shape[:3] != q.shape[:3]:
    raise ValueError(f"q, k must be [B, T, H, K] and v [B, T, H, V]; got {q.shape}, {k.shape}, {v.shape}")
  if g.shape != q.shape[:3]:
    raise ValueError(f"g must be [B, T, H] = {q.shape[:3]}; got {g.shape}")
  if beta is not None and beta.shape != q.shape[:3]:
    raise ValueError(f"beta must be [B, T, H] = {q.shape[:3]}; got {beta.shape}")
  want = (q.shape[0], q.shape[2], q.shape[3], v.shape[3])
  if initial_state is not None and initial_state.shape != want:
    raise ValueError(f"initial_state must be [B, H, K, V] = {want}; got {initial_state.shape}")


def check_dtypes(q, k, v, g, initial_state, beta=None):
  """q, k, v share one floating dtype; g, beta and the state are floating (any width)."""
  if not jnp.issubdtype(q.dtype, jnp.floating):
    raise ValueError(f"q must be floating point; got {q.dtype}")
  for name, x in (("k", k), ("v", v)):
    if x.dtype != q.dtype:
      raise ValueError(f"{name} must have q's dtype {q.dtype}; got {x.dtype}")
  for name, x in (("g", g), ("beta", beta), ("initial_state", initial_state)):
    if x is not None and not jnp.issubdtype(x.dtype, jnp.floating):
      raise ValueError(f"{name} must be floating point; got {x.dtype}")


def resolve(implementation, interpret, chunk_size, scale, default_chunk=DEFAULT_CHUNK):
  """(implementation, interpret, chunk) with dispatch's rule (``interpret`` may be the TPU
  interpreter's options, as there). The scale
  is baked into the kernels, so it must be a number, not an array."""
  if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)):
    raise ValueError(f"scale must be a Python number or None; got {type(scale).__name__}")
  impl, interp = dispatch.resolve(implementation, interpret)
  if chunk_size is None:
    chunk_size = default_chunk.get(impl, xla.DEFAULT_CHUNK)
  if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
    raise ValueError(f"chunk_size must be a positive int; got {chunk_size!r}")
  return impl, interp, chunk_size


def simple_gla(q, k, v, g, *, scale=None, initial_state=None, implementation="auto",
               chunk_size: int | None = None, interpret=None):
  """S_t = exp(g_t) S_{t-1} + k_t v_t^T, o_t = scale * q_t S_t (flash-linear-attention's
  conventions). q, k [B, T, H, K]; v [B, T, H, V]; g [B, T, H]; scale defaults to K**-0.5;
  initial_state [B, H, K, V]. Returns (o [B, T, H, V], final_state [B, H, K, V] float32).

  ``implementation``: one of IMPLEMENTATIONS ("auto": Pallas on TPU/GPU, XLA on CPU; see
  ``pallas_kernels.dispatch``); ``chunk_size`` None = that implementation's default;
  ``interpret`` as in ``dispatch.resolve`` (or a ``pltpu.InterpretParams`` for pallas_tpu)."""
  check_shapes(q, k, v, g, initial_state)
  check_dtypes(q, k, v, g, initial_state)
  impl, interpret, chunk_size = resolve(implementation, interpret, chunk_size, scale)
  if impl == "reference":
    return reference.simple_gla(q, k, v, g, scale=scale, initial_state=initial_state)
  if impl == "xla":
    return xla.simple_gla(q, k, v, g, scale=scale, initial_state=initial_state,
                          chunk_size=chunk_size)
  module = pallas_tpu if impl == "pallas_tpu" else pallas_gpu
  return module.simple_gla(q, k, v, g, scale=scale, initial_state=initial_state,
                           chunk_size=chunk_size, interpret=interpret)
