"""Accelerator targets for compiling on a host that has none: TPU topologies (libtpu) and
H100/H200 GPU targets (the CUDA PJRT plugin and ptxas), their meshes, and a per-chip table.

    from pallas_kernels import targets
    mesh = targets.mesh("v5e:2x2")                  # Mesh(("data", "fsdp") = (1, 4)) of TPU v5e
    mesh = targets.mesh("h100:8", shape=(2, 4))      # 8 abstract H100s on one host
    with jax.set_mesh(mesh):                         # dispatch reads the target from it
      compiled = jax.jit(f, in_shardings=...).lower(*abstract_args).compile()
    targets.chip("v5e:2x2").hbm_bytes                # what "fits" means

Topology names: TPU ``<chip>:<shape>`` as libtpu spells it (``v4:2x2x1``, ``v5e:2x2``,
``v5p:2x2x1``, ``v6e:2x2``; a single chip, ``v5e:1x1``, which libtpu refuses to build, is
the first chip of the smallest host, ``v5e:2x2``); GPU ``h100:<n>`` or ``h200:<n>`` (n GPUs
of one host; ``h100`` alone is one). Every failure is a ``TargetError`` of one line: an
unknown topology, or a missing compiler with the pip command that installs it.
"""

import dataclasses
import functools
import importlib.util
import math
import os
import re
import shutil

import jax
import numpy as np

AXES = ("data", "fsdp")             # hybrid_jax.train.sharding.AXES


class TargetError(ValueError):
  """A topology that cannot be built here; the message is one line."""


@dataclasses.dataclass(frozen=True)
class Chip:
  """Published peak dense bf16 FLOP/s, HBM bandwidth (bytes/s) and capacity per device (a
  TPU chip's devices share its figures: per device is per chip / devices per chip)."""
  name: str
  platform: str
  peak_bf16_flops: float
  hbm_bandwidth: float
  hbm_bytes: int
  host: tuple = ()         # TPU: the chip grid of one host, the smallest slice libtpu builds


GiB = 1 << 30
CHIPS = {
    "v4": Chip("v4", "tpu", 275e12, 1.2e12, 32 * GiB, (2, 2, 1)),
    "v5e": Chip("v5e", "tpu", 197e12, 8.19e11, 16 * GiB, (2, 2)),
    "v5p": Chip("v5p", "tpu", 459e12, 2.765e12, 95 * GiB, (2, 2, 1)),
    "v6e": Chip("v6e", "tpu", 918e12, 1.64e12, 32 * GiB, (2, 2)),
    "h100": Chip("h100", "gpu", 989e12, 3.35e12, 80 * 10**9),
    "h200": Chip("h200", "gpu", 989e12, 4.8e12, 141 * 10**9),
}

# XLA's GpuTargetConfig (text proto) of each GPU, from the published spec, trimmed to the
# fields jax 0.10/0.11 accept. Compute capability 9.0: Triton and ptxas build for sm_90a.
_GPU_CONFIG = """gpu_device_info {{
  threads_per_block_limit: 1024
  threads_per_warp: 32
  shared_memory_per_block: 49152
  shared_memory_per_core: 233472
  threads_per_core_limit: 2048
  core_count: 132
  fpus_per_core: 128
  block_dim_limit_x: 2147483647
  block_dim_limit_y: 65535
  block_dim_limit_z: 65535
  memory_bandwidth: {bandwidth}
  l2_cache_size: 52428800
  clock_rate_ghz: 1.98
  device_memory_size: {memory}
  shared_memory_per_block_optin: 232448
  cuda_compute_capability {{ major: 9 minor: 0 }}
  registers_per_core_limit: 65536
  registers_per_block_limit: 65536
}}
platform_name: "CUDA"
dnn_version_info {{ major: 9 minor: 7 }}
device_description_str: "{name}"
"""
GPU_TARGET_CONFIGS = {
    "h100": _GPU_CONFIG.format(bandwidth=3352320000000, memory=84929347584,
                               name="NVIDIA H100 80GB HBM3"),
    "h200": _GPU_CONFIG.format(bandwidth=4800000000000, memory=150754820096,
                               name="NVIDIA H200"),
}


def tpu_install_hint() -> str:
  return f'pip install "jax[tpu]=={jax.__version__}"  (or: pip install -e ".[tpu]")'


def gpu_install_hint() -> str:
  v = jax.__version__
  return (f'pip install "jax-cuda12-plugin=={v}" "jax-cuda12-pjrt=={v}" nvidia-cuda-nvcc-cu12'
          f'  (or: pip install -e ".[gpu-compile]")')


def ptxas() -> str | None:
  """ptxas on PATH, or the one of the nvidia-cuda-nvcc-cu12 wheel (where XLA also looks)."""
  found = shutil.which("ptxas")
  if found:
    return found
  spec = importlib.util.find_spec("nvidia")
  for root in (spec.submodule_search_locations or []) if spec else []:
    candidate = os.path.join(root, "cuda_nvcc", "bin", "ptxas")
    if os.path.exists(candidate):
      return candidate
  return None


def missing(platform: str) -> str | None:
  """Why this host cannot compile for ``platform`` ("tpu" or "gpu"), or None if it can."""
  if platform == "tpu":
    if importlib.util.find_spec("libtpu") is None:
      return f"libtpu is not installed; {tpu_install_hint()}"
    return None
  if platform == "gpu":
    if importlib.util.find_spec("jax_cuda12_plugin") is None:
      return f"the CUDA PJRT plugin is not installed; {gpu_install_hint()}"
    if ptxas() is None:
      return f"ptxas was not found (PATH or nvidia-cuda-nvcc-cu12); {gpu_install_hint()}"
    return None
  raise TargetError(f"platform must be 'tpu' or 'gpu'; got {platform!r}")


_NAME = re.compile(r"^(?P<chip>[a-z0-9]+)(?::(?P<shape>[0-9]+(?:x[0-9]+)*))?$")


def parse(topology: str) -> tuple[str, tuple[int, ...]]:
  """(chip, shape) of a topology name, e.g. ("v5e", (2, 2)), ("h100", (8,))."""
  m = _NAME.match(str(topology).strip().lower())
  if not m or m["chip"] not in CHIPS:
    raise TargetError(f"unknown topology {topology!r}: expected <chip>:<shape> with chip one "
                      f"of {sorted(CHIPS)}, e.g. v5e:2x2, v5p:2x2x1, h100:8")
  chip = CHIPS[m["chip"]]
  shape = tuple(int(x) for x in m["shape"].split("x")) if m["shape"] else (1,)
  if any(n < 1 for n in shape):
    raise TargetError(f"unknown topology {topology!r}: every dimension must be >= 1")
  if chip.platform == "gpu" and len(shape) != 1:
    raise TargetError(f"unknown topology {topology!r}: a GPU target is <gpu>:<n GPUs>, e.g. h100:8")
  if chip.platform == "tpu" and (not m["shape"] or len(shape) != len(chip.host)):
    example = "x".join(map(str, chip.host))
    raise TargetError(f"unknown topology {topology!r}: {chip.name} slices have {len(chip.host)} "
                      f"dimensions, e.g. {chip.name}:{example}")
  return chip.name, shape


def chip(topology: str) -> Chip:
  return CHIPS[parse(topology)[0]]


def platform(topology: str) -> str:
  return chip(topology).platform


@functools.lru_cache(maxsize=None)
def _tpu_devices(name: str) -> tuple:
  from jax.experimental import topologies   # lazy: needs libtpu / the CUDA plugin to describe devices
  return tuple(topologies.get_topology_desc(platform="tpu", topology_name=name).devices)


@functools.lru_cache(maxsize=None)
def _gpu_devices(name: str, n: int) -> tuple:
  from jax.experimental import topologies   # lazy: needs libtpu / the CUDA plugin to describe devices
  return tuple(topologies.get_topology_desc(
      platform="cuda", topology_name="", target_config=GPU_TARGET_CONFIGS[name],
      topology=f"1x1x{n}").devices)


def devices(topology: str) -> list:
  """The (deviceless) devices of ``topology``, in the order libtpu/XLA number them."""
  name, shape = parse(topology)
  plat = CHIPS[name].platform
  reason = missing(plat)
  if reason:
    raise TargetError(f"cannot compile for {topology}: {reason}")
  if plat == "gpu":
    return list(_gpu_devices(name, shape[0]))
  # Several processes may compile for TPU at once (pytest -n, other jobs): libtpu's
  # single-process lock file is for real chips, not for deviceless compilation.
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
  n_chips = math.prod(shape)
  host = CHIPS[name].host
  try:
    if n_chips >= math.prod(host) or any(n > h for n, h in zip(shape, host)):
      return list(_tpu_devices(f"{name}:{'x'.join(map(str, shape))}"))
    # libtpu builds whole hosts only: a smaller slice is the first chips of one host.
    host_devices = _tpu_devices(f"{name}:{'x'.join(map(str, host))}")
  except Exception as e:    # libtpu's own message names the bad part of the name
    raise TargetError(f"unknown topology {topology!r}: "
                      f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
  per_chip = len(host_devices) // math.prod(host)
  return list(host_devices[:n_chips * per_chip])


def mesh(topology: str, shape: tuple[int, int] | None = None, axes=AXES) -> jax.sharding.Mesh:
  """A ``Mesh`` of ``topology``'s devices; ``shape`` (default: everything on the last axis,
  i.e. pure FSDP) must multiply to the device count."""
  devs = devices(topology)
  shape = (1,) * (len(axes) - 1) + (len(devs),) if shape is None else tuple(shape)
  if math.prod(shape) != len(devs) or len(shape) != len(axes):
    raise TargetError(f"mesh shape {shape} over axes {axes} does not cover the {len(devs)} "
                      f"devices of {topology}")
  return jax.sharding.Mesh(np.array(devs).reshape(shape), axes)


def devices_per_chip(topology: str) -> int:
  """TPU v4 exposes each chip's two cores as devices; every other target one per chip."""
  name, shape = parse(topology)
  if CHIPS[name].platform == "gpu":
    return 1
  return max(1, len(devices(topology)) // math.prod(shape))


def hbm_per_device(topology: str) -> int:
  return chip(topology).hbm_bytes // devices_per_chip(topology)


def abstract(shape, dtype, mesh, spec=None) -> jax.ShapeDtypeStruct:
  """An argument of ``shape`` placed on ``mesh`` (``spec`` a PartitionSpec; None:
  replicated): without a sharding on the target's devices, jit would compile for the host."""
  spec = jax.sharding.PartitionSpec() if spec is None else spec
  return jax.ShapeDtypeStruct(shape, dtype, sharding=jax.sharding.NamedSharding(mesh, spec))


def compile_on(fn, mesh, *abstract_args):
  """``jax.jit(fn)`` compiled deviceless for ``mesh``'s target, traced under
  ``jax.set_mesh(mesh)`` (the kernels' contract: see ``pallas_kernels.dispatch``)."""
  with jax.set_mesh(mesh):
    return jax.jit(fn).lower(*abstract_args).compile()


_CUSTOM_CALL = re.compile(r"^\s*(?:ROOT\s+)?%?(?P<name>[\w.\-]+)\s*=\s*(?P<shapes>.*?)\s+"
                          r"custom-call\(")
_SHAPE = re.compile(r"\b(?:bf16|f16|f32|f64|s32|u32|s8|u8|pred)\[(?P<dims>[0-9,]*)\]")


def custom_call_shapes(hlo_text: str, names=("tpu_custom_call", "triton")) -> list:
  """(instruction name, [result shapes]) of every custom call in compiled HLO text whose line
  mentions one of ``names`` (Mosaic: ``tpu_custom_call``; Triton: ``__gpu$xla.gpu.triton``)
  or whose instruction name starts with a kernel name."""
  found = []
  for line in hlo_text.splitlines():
    m = _CUSTOM_CALL.match(line)
    if not m:
      continue
    if not any(n in line for n in names):
      continue
    shapes = [tuple(int(d) for d in s["dims"].split(",") if d)
              for s in _SHAPE.finditer(m["shapes"])]
    found.append((m["name"], shapes))
  return found
