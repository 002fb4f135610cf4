"""The worker protocol of ``hybrid-jax bench train``: every side (the project, torch eager,
torch.compile, ...) is a process of its own, one-shot (``project_row``) or long-lived
(``Measured``, the project's ``--worker --serve``), pinned to one core with ``--threads 1``
(CPU affinity: the only limit XLA:CPU's thread pool obeys). A worker prints JSON rows on
stdout; a long-lived one answers each line ``n`` on its stdin with the wall seconds of ``n``
steps. A worker that fails is one line naming the file that keeps its whole output."""

import importlib.util
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile

import jax

from hybrid_jax.bench import BenchError
from hybrid_jax.cli_args import ArgumentParser
from hybrid_jax.bench.timing import matmul_peak_flops, wall_times
from hybrid_jax.bench.train_measure import (
    breakdown, model_flops_per_s, project_step_seconds, shape_config, stepper)
from hybrid_jax.train import distributed, local_processes, sharding
from pallas_kernels import cpu_matmul

PEER_MODULE = "hybrid_jax.bench.torch_peer"
WORKER_MODULE = "hybrid_jax.bench.train"      # its ``--worker`` runs ``worker`` below


def project_command(shape: str, *flags: str) -> list[str]:
  """The command of a project worker timing ``shape`` (``flags`` may hold ``config_argv``)."""
  return [sys.executable, "-m", WORKER_MODULE, "--worker", "--shape", shape, *flags]


def config_argv(path, argv) -> list[str]:
  """``--config FILE`` and the overrides again, for a worker to build the same config."""
  return (["--config", path] if path else []) + list(argv)


def peer_args(cfg) -> list[str]:
  """The torch peer's flags for the same network and batch."""
  m = cfg.model
  return ["--d-model", str(m.d_model), "--layers", str(m.n_layers), "--heads", str(m.n_heads),
          "--kv-heads", str(m.n_kv_heads), "--d-ff", str(m.d_ff), "--vocab", str(m.vocab_size),
          "--window", str(m.window), "--pattern", m.pattern, "--seq-len", str(cfg.data.seq_len),
          "--batch", str(cfg.train.batch_size)]


def one_core(threads: int) -> int | None:
  """The core a ``--threads 1`` worker is pinned to (the last one this process may use)."""
  if threads != 1 or not hasattr(os, "sched_getaffinity"):
    return None
  return max(os.sched_getaffinity(0))


def thread_env(threads: int) -> dict:
  """Environment of a worker: CPU only, and with ``threads == 1`` Eigen's matmul threading
  off (the core itself is set by ``one_core``: XLA:CPU's pool follows CPU affinity only)."""
  env = dict(os.environ, JAX_PLATFORMS="cpu")
  if threads == 1:
    env["XLA_FLAGS"] = (env.get("XLA_FLAGS", "") + " --xla_cpu_multi_thread_eigen=false"
                        " intra_op_parallelism_threads=1").strip()
  return env


def torch_available() -> bool:
  return importlib.util.find_spec("torch") is not None


# --- the worker: runs in its own process ---------------------------------------------------

def serve(one_step, emit) -> None:
  """The block loop of a long-lived worker (``Measured``): each line ``n`` on stdin runs
  ``n`` timed steps, and ``emit`` gets their wall seconds; it ends at end of input."""
  for line in sys.stdin:
    emit(dict(step_s=wall_times(one_step, int(line), warmup=0)))


def worker(argv) -> dict:
  """One project measurement: prints and returns a JSON row. ``--serve``: a long-lived
  worker instead, which prints its row once compiled and then times blocks of steps on
  request (``serve``)."""
  p = ArgumentParser(prog="hybrid-jax bench train --worker")
  p.add_argument("--shape", required=True)
  p.add_argument("--steps", type=int, default=10)
  p.add_argument("--no-donate", action="store_true")
  p.add_argument("--breakdown", action="store_true")
  p.add_argument("--serve", action="store_true")
  p.add_argument("--cold", action="store_true")
  p.add_argument("--plain-dots", action="store_true")
  p.add_argument("--config", default=None)
  a, overrides = p.parse_known_args(argv)
  cpu_matmul.set_fast_form(not a.plain_dots)  # before anything is traced
  if a.cold:                                  # compiled here, as a config's first run is
    jax.config.update("jax_enable_compilation_cache", False)
  processes = distributed.initialize()        # --processes: joined from the environment
  cfg = shape_config(a.shape, a.config, overrides)
  mesh = sharding.make_mesh(cfg.mesh) if processes > 1 else None
  variant = "-no-donate" if a.no_donate else "-plain-dots" if a.plain_dots else ""
  row = dict(side="project" + variant, shape=a.shape,
             threads=len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
             else os.cpu_count(), processes=processes)
  emit = ((lambda r: print(json.dumps(r), flush=True)) if distributed.is_primary()
          else (lambda r: None))
  if a.serve:
    one_step = stepper(cfg, donate=not a.no_donate, mesh=mesh)
    emit(row)
    serve(one_step, emit)
    return row
  step_s = project_step_seconds(cfg, a.steps, donate=not a.no_donate, mesh=mesh)
  row.update(step_s=step_s, tokens_per_s=cfg.train.batch_size * cfg.data.seq_len / step_s)
  if not distributed.is_primary():
    return row
  if a.breakdown:
    row["mfu"] = model_flops_per_s(cfg, step_s) / matmul_peak_flops(1024, reps=5)
    row.update(breakdown(cfg, step_s))
  emit(row)
  jax.clear_caches()
  return row


# --- the driver's end: starting workers and reading their rows -----------------------------

def _run(cmd, env, what, cpu=None) -> dict:
  pin = None if cpu is None else (lambda: os.sched_setaffinity(0, {cpu}))
  r = subprocess.run(cmd, capture_output=True, text=True, env=env, preexec_fn=pin)
  lines = [l for l in r.stdout.splitlines() if l.startswith("{")]
  if r.returncode or not lines:
    raise BenchError(_failure(what, r.stderr))
  return json.loads(lines[-1])


def _failure(what: str, stderr: str) -> str:
  """One line for a failed worker: its last line of output, and where its whole output was
  kept (a native crash ends in a stack trace whose last line names no cause)."""
  with tempfile.NamedTemporaryFile("w", prefix="hybrid_jax_bench_", suffix=".log",
                                   delete=False) as f:
    f.write(stderr)
  tail = (stderr.strip().splitlines() or ["no output"])[-1].strip()
  return f"{what} failed: {tail} (its whole output: {f.name})"


def project_row(shape, steps, threads, *, breakdown_=False, extra=()) -> dict:
  """One one-shot project worker's row (the breakdown's: one process, ``threads``);
  ``extra``: more worker flags (``--plain-dots``)."""
  cmd = project_command(shape, "--steps", str(steps), *(["--breakdown"] if breakdown_ else []),
                        *extra)
  return _run(cmd, thread_env(threads), f"project worker ({shape})", one_core(threads))


class Measured:
  """One side of the comparison as a long-lived worker (``processes`` > 1: that many JAX
  processes, one per core, data parallel, as ``train --local_processes`` runs them): started
  and warmed up once, then timed in blocks of steps on request while the other sides wait
  (blocked on their input, off the cores). Blocks of all sides alternate many times within a
  run, so a shared machine's slow spells fall on both sides of a ratio alike; separate
  processes per measurement (the bench before this) paid a start-up per round and, with few
  rounds, gave ranges of 0.9-1.4x for one ratio on a noisy host."""

  def __init__(self, what: str, cmd: list[str], env: dict | None = None, cpu=None,
               processes: int = 1):
    self.what, self.procs, self.logs, self._buf = what, [], [], b""
    if processes == 1:
      specs = [(env, cpu)]
    else:
      cores, port = local_processes.usable_cores(), local_processes.free_port()
      specs = [(dict(local_processes.process_env(i, processes, port), JAX_PLATFORMS="cpu"),
                cores[i]) for i in range(processes)]
    try:
      for i, (env_i, cpu_i) in enumerate(specs):
        log = tempfile.TemporaryFile("w+")
        self.logs.append(log)
        self.procs.append(subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE if i == 0 else subprocess.DEVNULL,
            stderr=log, env=env_i,
            preexec_fn=None if cpu_i is None else (lambda c=cpu_i: os.sched_setaffinity(0, {c}))))
      self.ready = self._read()            # the worker's row, once compiled and warmed up
    except BaseException:
      self.close()
      raise

  def _read(self) -> dict:
    """The next JSON line of process 0; a one-line BenchError when a process ends first."""
    out = self.procs[0].stdout.fileno()
    while True:
      while b"\n" in self._buf:
        line, self._buf = self._buf.split(b"\n", 1)
        if line.startswith(b"{"):
          return json.loads(line)
      ended = [p for p in self.procs if p.poll() is not None]
      if ended:
        break
      if select.select([out], [], [], 0.5)[0]:
        chunk = os.read(out, 1 << 16)
        if not chunk:
          self.procs[0].wait()
          break
        self._buf += chunk
    failed = next((i for i, p in enumerate(self.procs) if p.returncode), 0)
    self.logs[failed].seek(0)
    stderr = self.logs[failed].read()
    self.close()
    raise BenchError(_failure(self.what, stderr))

  def block(self, steps: int) -> float:
    """Median wall seconds of ``steps`` steps."""
    for p in self.procs:
      p.stdin.write(b"%d\n" % steps)
      p.stdin.flush()
    return statistics.median(self._read()["step_s"])

  def close(self) -> None:
    for p in self.procs:
      if p.stdin and not p.stdin.closed:
        try:
          p.stdin.close()                   # end of input: the worker returns
        except OSError:
          pass
    for p in self.procs:
      try:
        p.wait(timeout=30)
      except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
    for log in self.logs:
      log.close()
