"""Which implementation of an op runs, for which platform, and on how much of the batch.

Every ``api.py`` shares this so that ``implementation="auto"`` means the same thing for every
op. The rule (also in docs/kernels.md):

* **The target, not the host.** ``auto`` is the Pallas kernel of the platform being compiled
  for (Mosaic on TPU, Triton on GPU) and the XLA path for CPU. The target platform is, first
  match wins: the one named by an enclosing ``compile_for(platform)``; the platform of the
  mesh in context (``jax.set_mesh(mesh)``: its abstract mesh carries the devices' platform,
  also for a deviceless TPU topology or an abstract GPU target on a CPU host); this process's
  ``jax.default_backend()``.
* **Interpret only on CPU.** ``interpret=None`` interprets a Pallas kernel exactly when the
  target is CPU. ``interpret=False`` asks for the compiled kernel whatever the host (lowering
  or compiling for an accelerator from a CPU host). A Pallas kernel of the other
  accelerator than the target is a one-line error at trace time unless interpreted.
* **Per-device batch.** A Pallas call cannot be partitioned by XLA (Mosaic refuses; Triton
  would run on the all-gathered batch), so ``per_device`` wraps every Pallas path in a
  ``shard_map`` over the batch axes (``BATCH_AXES``, hybrid_jax's ``data`` and ``fsdp``) of
  the mesh in context. The caller's contract: trace under ``jax.set_mesh(mesh)`` (jax 0.10
  and 0.11; inside ``jax.jit``, the abstract mesh is what is read). Without a mesh in context
  the call is unsharded (one device).

``jax.lax.platform_dependent`` would also resolve per target, at lowering, but it traces every
branch and, under ``jax.grad``, carries the residuals of all of them through one ``cond``; the
mesh is needed for ``shard_map`` anyway, so it names the target too.

Also here: the argument checks that the recurrent ops (``linear_scan``, ``delta_rule``) share.
"""

import contextlib
import contextvars
import math
import numbers
import os

import jax
import jax.numpy as jnp
from jax.sharding import PartitionSpec as P

IMPLEMENTATIONS = ("auto", "reference", "xla", "pallas_tpu", "pallas_gpu")
PLATFORMS = ("cpu", "tpu", "gpu")
BATCH_AXES = ("data", "fsdp")       # hybrid_jax.train.sharding.BATCH_AXES
_PALLAS_BACKEND = {"pallas_tpu": "tpu", "pallas_gpu": "gpu"}
_AUTO = {"tpu": "pallas_tpu", "gpu": "pallas_gpu", "cpu": "xla"}
_FORCED = contextvars.ContextVar("pallas_kernels_target", default=None)


def _platform(name: str) -> str:
  name = name.lower()
  return "gpu" if name in ("cuda", "rocm", "gpu") else name


@contextlib.contextmanager
def compile_for(platform: str):
  """Trace the ops inside for ``platform`` ("tpu", "gpu"/"cuda", "cpu") whatever the host or
  mesh: e.g. ``jax.export`` of the compiled kernels from a CPU host without a mesh."""
  platform = _platform(platform)
  if platform not in PLATFORMS:
    raise ValueError(f"compile_for: platform must be one of {PLATFORMS}; got {platform!r}")
  token = _FORCED.set(platform)
  try:
    yield
  finally:
    _FORCED.reset(token)


def _context_mesh():
  get = getattr(jax.sharding, "get_abstract_mesh", None)
  mesh = get() if get is not None else None
  return None if mesh is None or mesh.empty else mesh


def target_platform() -> str:
  """"cpu", "tpu" or "gpu": what the code being traced is compiled for (module docstring)."""
  if _FORCED.get() is not None:
    return _FORCED.get()
  mesh = _context_mesh()
  device = getattr(mesh, "abstract_device", None) if mesh is not None else None
  if device is not None and getattr(device, "platform", None):
    return _platform(device.platform)
  return _platform(jax.default_backend())


def one_cpu_device() -> bool:
  """Whether the code being traced is compiled for CPU and runs on one device (no mesh in
  context, a mesh of one, or inside a ``shard_map`` manual over every mesh axis, where each
  device has its own rows): where an XLA path may trade parallel width for cache reuse."""
  mesh = _context_mesh()
  manual = set(getattr(mesh, "manual_axes", ()) or ()) if mesh is not None else set()
  return target_platform() == "cpu" and (mesh is None or mesh.size == 1
                                         or manual >= set(mesh.axis_names))


def cpu_threads() -> int:
  """The cores this process may run on: XLA:CPU sizes its thread pool by CPU affinity (the
  local launcher and ``hybrid-jax bench train --threads 1`` pin a worker to one core)."""
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def resolve(implementation: str, interpret=None) -> tuple[str, object]:
  """(concrete implementation, interpret) for the target platform.

  ``interpret=None`` interprets exactly when the target is CPU; ``interpret=False`` asks for
  the compiled kernel (lowering or compiling for an accelerator from a CPU host).
  ``interpret`` may also be the TPU interpreter's options (a ``pltpu.InterpretParams``: race
  detection, bounds checks), which mean "interpret" and are handed on to ``pallas_tpu``; other
  kernels get ``True``."""
  if implementation not in IMPLEMENTATIONS:
    raise ValueError(f"implementation must be one of {IMPLEMENTATIONS}; got {implementation!r}")
  target = target_platform()
  if implementation == "auto":
    implementation = _AUTO.get(target, "xla")
  if implementation not in _PALLAS_BACKEND:
    return implementation, False
  options = None if interpret is None or isinstance(interpret, bool) else interpret
  wanted = _PALLAS_BACKEND[implementation]
  interpret = target == "cpu" if interpret is None else bool(interpret)
  if target not in ("cpu", wanted) and not interpret:
    raise ValueError(f"implementation={implementation!r} needs a {wanted.upper()} target (or "
                     f"interpret=True); the code is being compiled for {target}")
  if interpret and options is not None and implementation == "pallas_tpu":
    return implementation, options
  return implementation, interpret


def batch_axes(batch: int, mesh=None) -> tuple[str, ...]:
  """The mesh axes the batch is split over for a kernel call: those of ``BATCH_AXES`` in the
  mesh (``mesh`` or the one in context), of size > 1, not already manual (inside a
  shard_map), in order, as long as their product divides ``batch``. An axis that does not
  divide it is left out: the call is then replicated over it (correct, redundant work)."""
  mesh = _context_mesh() if mesh is None else mesh
  if mesh is None:
    return ()
  manual = set(getattr(mesh, "manual_axes", ()) or ())
  axes, size = [], 1
  for name in BATCH_AXES:
    n = mesh.shape.get(name, 1) if name in mesh.axis_names else 1
    if n > 1 and name not in manual and batch % (size * n) == 0:
      axes.append(name)
      size *= n
  return tuple(axes)


def per_device(fn, *args):
  """``fn(*args)`` on each device's rows: every array in ``args`` (None allowed) and every
  output has the batch as its leading dimension. Under a mesh of more than one device in
  context the call is a ``shard_map`` manual over every mesh axis, the batch split over
  ``batch_axes``; otherwise a plain call."""
  arrays = [a for a in args if a is not None]
  mesh = _context_mesh()
  manual = set(getattr(mesh, "manual_axes", ()) or ()) if mesh is not None else set()
  if mesh is None or mesh.size == 1 or not arrays or manual >= set(mesh.axis_names):
    return fn(*args)
  axes = batch_axes(arrays[0].shape[0], mesh)
  slots = [a is not None for a in args]

  def body(*present):
    it = iter(present)
    return fn(*(next(it) if s else None for s in slots))

  # Every axis goes manual (Mosaic refuses a partly automatic mesh); those not in ``axes``
  # see the whole batch, replicated.
  spec = P(axes or None)
  return jax.shard_map(body, mesh=mesh, in_specs=tuple(spec for _ in arrays), out_specs=spec,
                       axis_names=set(mesh.axis_names) - manual, check_vma=False)(*arrays)


def per_device_shape(shape: tuple, mesh=None) -> tuple:
  """``shape`` (batch leading) as one device sees it inside ``per_device``."""
  axes = batch_axes(shape[0], mesh)
  mesh = _context_mesh() if mesh is None else mesh
  n = math.prod(mesh.shape[a] for a in axes) if axes else 1
  return (shape[0] // n,) + tuple(shape[1:])


# The argument checks of the recurrent ops (linear_scan and delta_rule share them).


def check_scan_shapes(q, k, v, g, initial_state, beta=None):
  if q.ndim != 4 or k.shape != q.shape or v.ndim != 4 or v.shape[:3] != q.shape[:3]:
    raise ValueError(f"q, k must be [B, T, H, K] and v [B, T, H, V]; got {q.shape}, {k.shape}, {v.shape}")
  if g.shape != q.shape[:3]:
    raise ValueError(f"g must be [B, T, H] = {q.shape[:3]}; got {g.shape}")
  if beta is not None and beta.shape != q.shape[:3]:
    raise ValueError(f"beta must be [B, T, H] = {q.shape[:3]}; got {beta.shape}")
  want = (q.shape[0], q.shape[2], q.shape[3], v.shape[3])
  if initial_state is not None and initial_state.shape != want:
    raise ValueError(f"initial_state must be [B, H, K, V] = {want}; got {initial_state.shape}")


def check_scan_dtypes(q, k, v, g, initial_state, beta=None):
  """q, k, v share one floating dtype; g, beta and the state are floating (any width)."""
  if not jnp.issubdtype(q.dtype, jnp.floating):
    raise ValueError(f"q must be floating point; got {q.dtype}")
  for name, x in (("k", k), ("v", v)):
    if x.dtype != q.dtype:
      raise ValueError(f"{name} must have q's dtype {q.dtype}; got {x.dtype}")
  for name, x in (("g", g), ("beta", beta), ("initial_state", initial_state)):
    if x is not None and not jnp.issubdtype(x.dtype, jnp.floating):
      raise ValueError(f"{name} must be floating point; got {x.dtype}")


def resolve_scan(implementation, interpret, chunk_size, scale, default_chunk):
  """(implementation, interpret, chunk) with ``resolve``'s rule. The scale is baked into the
  kernels, so it must be a number, not an array; ``default_chunk`` maps implementation ->
  chunk (the XLA one when the implementation has none)."""
  if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)):
    raise ValueError(f"scale must be a Python number or None; got {type(scale).__name__}")
  impl, interp = resolve(implementation, interpret)
  if chunk_size is None:
    chunk_size = default_chunk.get(impl, default_chunk["xla"])
  if isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1:
    raise ValueError(f"chunk_size must be a positive int; got {chunk_size!r}")
  return impl, interp, chunk_size
