"""Which JAX platforms a command on this host starts (a leaf module: it imports no JAX).

With libtpu or the CUDA plugin installed (as ``plan`` asks), JAX tries every plugin at
start-up, on a host without the chip too: libtpu prints its ``E0000`` lines, the CUDA
plugin a traceback, and each costs start-up time. A command that computes here (train,
eval, ...) on a host with no TPU or GPU device therefore keeps JAX on the CPU, unless the
user chose with ``JAX_PLATFORMS``, and says so once. ``plan`` and ``sweep`` are left alone:
plan compiles for any target, and a sweep's jobs run on other hosts and inherit the
launcher's environment; each job's worker (``hybrid_jax.launch.worker``) decides on its own
host, as ``train`` does.
"""

import glob
import importlib.util
import os
import sys

HOST_COMMANDS = ("train", "eval", "analyze", "export", "bench", "plot", "data", "fit-scaling")
_DEVICE_GLOBS = ("/dev/accel*", "/dev/vfio/[0-9]*", "/dev/nvidia[0-9]*")   # TPU VMs; NVIDIA GPUs
_PLUGINS = {"libtpu": "TPU", "jax_cuda12_plugin": "CUDA", "jax_cuda13_plugin": "CUDA"}


def accelerator_present() -> bool:
  return any(glob.glob(pattern) for pattern in _DEVICE_GLOBS)


def installed_plugins() -> list[str]:
  return sorted({name for module, name in _PLUGINS.items()
                 if importlib.util.find_spec(module) is not None})


def keep_jax_on_cpu(command: str, log=None) -> bool:
  """Set ``JAX_PLATFORMS=cpu`` for a host command where accelerator plugins are installed but
  no accelerator is present (and the user has not chosen); say why, once. Whether it did."""
  if command not in HOST_COMMANDS or "JAX_PLATFORMS" in os.environ or accelerator_present():
    return False
  plugins = installed_plugins()
  if not plugins:
    return False
  os.environ["JAX_PLATFORMS"] = "cpu"
  (log or (lambda m: print(m, file=sys.stderr, flush=True)))(
      f"hybrid-jax: no TPU or GPU on this host: JAX runs on the CPU without starting the "
      f"installed {' and '.join(plugins)} plugin{'s' * (len(plugins) > 1)} (set JAX_PLATFORMS "
      "to choose)")
  return True
