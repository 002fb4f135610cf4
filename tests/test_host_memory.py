"""XLA:CPU's per-step temporaries are reused from the heap, not page-faulted in anew each
step (glibc would otherwise mmap and unmap a >64 MB request from an XLA thread's arena)."""

import json
import os
import subprocess
import sys

import pytest

PROBE = r"""
import json, os, resource, sys
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})   # one XLA thread, as a study worker
import hybrid_jax, jax, jax.numpy as jnp
f = jax.jit(lambda a, b: (a @ b) @ b.T)   # a 128 MB [8192, 4096] temporary between the dots
a, b = jnp.ones((8192, 8)), jnp.ones((8, 4096))
for _ in range(3):
  f(a, b).block_until_ready()
windows = []                     # the quietest of 4 windows of 3 calls: the host's memory
for _ in range(4):               # reclaim (e.g. DAMON) can fault in a window's pages anew
  r0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
  for _ in range(3):
    f(a, b).block_until_ready()
  windows.append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - r0) / 3)
print(json.dumps(min(windows)))
"""


def _faults_per_call(**env) -> float:
  out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, check=True,
                       env=dict(os.environ, JAX_PLATFORMS="cpu", **env))
  return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")
def test_step_temporaries_do_not_page_fault_after_the_first_call():
  system = _faults_per_call(HYBRID_JAX_MALLOC="system")
  tuned = _faults_per_call()
  assert system > 20_000, f"the probe no longer allocates fresh pages per call ({system} faults)"
  assert tuned < 0.05 * system, f"{tuned} page faults per call with the heap kept, {system} without"


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc malloc only")
def test_an_import_after_jax_started_its_threads_warns_in_one_line():
  def stderr(code):
    r = subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True,
                       text=True, check=True, env=dict(os.environ, JAX_PLATFORMS="cpu"))
    return r.stderr
  said = "imported after JAX started its CPU threads"
  late = [l for l in stderr("import jax; jax.devices(); import hybrid_jax").splitlines()
          if said in l]
  assert len(late) == 1 and "import hybrid_jax before running any JAX op" in late[0]
  early = stderr("import hybrid_jax, jax; jax.devices()\n"
                 "from hybrid_jax.host_memory import jax_threads_started\n"
                 "assert jax_threads_started()")              # the threads are seen once they run
  assert said not in early


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="counts threads in /proc")
def test_importing_the_package_gives_numpy_and_its_children_one_blas_thread_unless_set():
  """``import hybrid_jax`` before numpy: OpenBLAS starts no worker thread of its own (the
  process has one thread after numpy loaded it), and a child process inherits the setting;
  a value the user set is kept (and OpenBLAS starts its workers)."""
  code = ("import hybrid_jax, numpy, os, subprocess, sys\n"
          "threads = len(os.listdir('/proc/self/task'))\n"
          "child = subprocess.run([sys.executable, '-c', 'import os; print(os.environ.get(\"OPENBLAS_NUM_THREADS\"))'],"
          " capture_output=True, text=True).stdout.strip()\n"
          "print(os.environ['OPENBLAS_NUM_THREADS'], child, threads)")
  env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env)
  assert out.stdout.split() == ["1", "1", "1"]
  mine = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                        env=dict(env, OPENBLAS_NUM_THREADS="2"))
  assert mine.stdout.split() == ["2", "2", "2"]
