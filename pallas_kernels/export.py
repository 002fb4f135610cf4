"""Ahead-of-time lowering of the kernels for an accelerator this host does not have.

Used by the tests (every kernel must lower for TPU and CUDA from a CPU machine) and by
anyone exporting a model for another platform. Two things stand in the way, and this module
handles both in one place:

* Triton custom calls carry no serialization-compatibility guarantee, so ``jax.export``
  refuses them unless that check is disabled;
* from jax 0.11 the Triton lowering asks which GPU it targets (its compute capability): on a
  host without one it must be named through an abstract mesh's ``AbstractDevice``.
"""

import contextlib

import jax

TRITON_CALL = "__gpu$xla.gpu.triton"
DEFAULT_GPU = "NVIDIA H100"     # the target whose compute capability the Triton IR is built for


@contextlib.contextmanager
def gpu_target(device_kind: str = DEFAULT_GPU):
  """Lower Triton kernels for ``device_kind`` (jax >= 0.11; a no-op where jax does not ask,
  or where a GPU is present)."""
  abstract_device = getattr(jax.sharding, "AbstractDevice", None)
  if abstract_device is None or jax.default_backend() == "gpu":
    yield
    return
  mesh = jax.sharding.AbstractMesh(
      (1,), ("_target",), (jax.sharding.AxisType.Explicit,),
      abstract_device=abstract_device(device_kind=device_kind, num_cores=None, platform="gpu"))
  with jax.sharding.use_abstract_mesh(mesh):
    yield


def export_for(fn, args, platform: str, *, gpu: str = DEFAULT_GPU):
  """``jax.export`` of ``jax.jit(fn)`` at ``args`` (arrays or ShapeDtypeStructs) for
  ``platform`` ("tpu", "cuda" or "cpu")."""
  checks = []
  ctx = contextlib.nullcontext()
  if platform == "cuda":
    checks = [jax.export.DisabledSafetyCheck.custom_call(TRITON_CALL)]
    ctx = gpu_target(gpu)
  with ctx:
    return jax.export.export(jax.jit(fn), platforms=[platform], disabled_checks=checks)(*args)
