"""What runs on the Ray cluster: one detached supervisor actor per sweep root, and the
trainer processes it starts.

The supervisor is a named, detached actor (``hj-sweep:<root digest>``), so it outlives the
launcher that created it: a launcher that dies leaves every run training, and a new
``sweep submit`` finds the actor by name and attaches instead of starting duplicates. It
holds no CPU and restarts when its node dies (Ray's ``max_restarts``); the runs it was given
are kept in ``<root>/.ray/runs.json`` and taken up again on restart.

Each run is a loop of attempts, bounded by its ``max_attempts``: an attempt starts the run's
trainer process(es) (``python -m hybrid_jax.launch.worker RUN_DIR``, as every backend does)
as Ray tasks holding the run's resources, one task, or one per bundle of a placement group
with the JAX coordinator, process count and id in ``HYBRID_JAX_*`` (``train.distributed``).
A node that dies, or a trainer preempted (exit 143) or killed by a signal (the OOM killer),
ends the attempt and the next resumes from the run's last checkpoint; a failure the trainer
reports (exit 1: a NaN loss, a bad config) ends the run.
A run whose lock another trainer holds (a second launcher's, a zombie of a lost attempt
still checkpointing) waits for it without spending an attempt, so no run trains twice.
``<run>/ray_run.json`` records the attempts and what the attempt is doing; ``sweep status``
shows it.
"""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from hybrid_jax.launch.local import PREEMPTED, die_with_parent, single_threaded
from hybrid_jax.launch.ray_request import Request
from hybrid_jax.launch.worker import BUSY_EXIT_CODE
from hybrid_jax.run import LAUNCH_FILE, RunDir, atomic_write_text

RUN_FILE = "ray_run.json"
LIST_FILE = Path(".ray") / "runs.json"
NAMESPACE = "hybrid_jax"
NOT_SHARED = 3          # a trainer's node cannot see the run directory
LOST = -1               # the trainer's node or worker died
BUSY_WAIT_S = 3.0
CANCEL_GRACE_S = 60.0   # a cancelled trainer checkpoints first; then it is killed
IDLE_EXIT_S = 60.0      # a supervisor with nothing to do exits (a later submit starts one)


def terminal(phase: str) -> bool:
  return phase in ("done", "failed") or phase.startswith("gave up")


@ray.remote(max_retries=0)
def node_address() -> tuple[str, int]:
  """The IP and a free port of the node holding bundle 0: the JAX coordinator's address."""
  with socket.socket() as s:
    s.bind(("", 0))
    port = s.getsockname()[1]
  return ray.util.get_node_ip_address(), port


def claim_cores(n: int) -> tuple[list[int] | None, list]:
  """``n`` cores of this machine that no other trainer started here holds, and the locks
  that hold them (released when this task ends), or (None, []) when there are not ``n``
  free. Why: Ray counts a node's CPUs but does not pin, and XLA:CPU splits a step over the
  cores a process may use, so an unpinned trainer's losses differ in rounding from the
  local and Slurm backends' pinned ones, and two unpinned trainers fight over every core.
  Ray still decides how many trainers share a node; this only says which core is whose."""
  import fcntl
  if not hasattr(os, "sched_setaffinity"):
    return None, []
  where = Path(tempfile.gettempdir()) / "hybrid_jax_cores"
  where.mkdir(exist_ok=True)
  cores, locks = [], []
  for core in sorted(os.sched_getaffinity(0)):
    f = open(where / f"{core}.lock", "w")
    try:
      fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
      f.close()
      continue
    cores.append(core)
    locks.append(f)
    if len(cores) == n:
      return cores, locks
  for f in locks:
    f.close()
  return None, []


@ray.remote(max_retries=0)
def train_process(run_dir: str, env: dict, log_name: str, header: str, pin: int = 0) -> int:
  """One trainer process of a run; its exit code. A cancel (``ray.cancel``) reaches the
  trainer as SIGTERM: it checkpoints and exits 143. The trainer dies with this worker.
  ``pin``: run it on that many cores of its own (see ``claim_cores``)."""
  run_dir = Path(run_dir)
  node = ray.get_runtime_context().get_node_id()
  if not (run_dir / LAUNCH_FILE).exists():
    print(f"hybrid-jax ray: {run_dir} is not visible on node {node}: --root must be a "
          "filesystem every node mounts at the same path", file=sys.stderr)
    return NOT_SHARED
  env = {**os.environ, **env}
  env.setdefault("JAX_COMPILATION_CACHE_DIR", str(run_dir.parent / ".xla_cache"))
  cores, _held = claim_cores(pin) if pin else (None, [])

  def preexec():
    die_with_parent()
    if cores:
      os.sched_setaffinity(0, cores)

  with open(run_dir / log_name, "a") as log:
    log.write(f"{header} on node {node} ({ray.util.get_node_ip_address()})"
              + (f", cores {cores}" if cores else "") + "\n")
    log.flush()
    p = subprocess.Popen([sys.executable, "-m", "hybrid_jax.launch.worker", str(run_dir)],
                         stdout=log, stderr=subprocess.STDOUT, env=env, preexec_fn=preexec)
  try:
    return p.wait()
  except KeyboardInterrupt:         # ray.cancel: stop at a checkpoint, as a preemption does
    p.send_signal(signal.SIGTERM)
    return p.wait()


def trainer_env(request: Request) -> dict:
  """A CPU-only process of one CPU runs XLA on one thread (as the local and Slurm backends'
  one-core workers do), so its losses are theirs."""
  if request.gpus or request.tpu or request.cpus > 1:
    return {}
  flags = single_threaded(os.environ).get("XLA_FLAGS")
  return {} if flags == os.environ.get("XLA_FLAGS") else {"XLA_FLAGS": flags}


def task_options(bundle: dict, accelerator_type: str | None = None) -> dict:
  """Ray task options holding one bundle's resources."""
  rest = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU", "memory")}
  out = dict(num_cpus=bundle.get("CPU", 0), num_gpus=bundle.get("GPU", 0), resources=rest)
  if bundle.get("memory"):
    out["memory"] = bundle["memory"]
  if accelerator_type:
    out["accelerator_type"] = accelerator_type
  return out


def read_run_file(run_dir) -> dict:
  try:
    return json.loads((Path(run_dir) / RUN_FILE).read_text())
  except (OSError, ValueError):
    return {}


class _Run:
  """One run's attempts (a thread of the supervisor)."""

  def __init__(self, supervisor, run_dir: str, request: dict, max_attempts: int, attempts: int):
    self.supervisor, self.run_dir = supervisor, Path(run_dir)
    self.request, self.max_attempts = Request(**request), max_attempts
    self.attempts, self.phase, self.nodes = attempts, "queued", []
    self.last = None                   # how the previous attempt ended
    self.entry = dict(run_dir=run_dir, request=request, max_attempts=max_attempts)
    self.thread = threading.Thread(target=self.loop, name=self.run_dir.name, daemon=True)

  def record(self, phase: str, **extra):
    self.phase = phase
    atomic_write_text(self.run_dir / RUN_FILE, json.dumps(dict(
        actor=self.supervisor.name, attempts=self.attempts, max_attempts=self.max_attempts,
        phase=phase, last=self.last, nodes=self.nodes,
        updated=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        **extra)) + "\n")

  def loop(self):
    try:
      self._loop()
    except Exception as e:            # never a silent thread death: the run says why
      self.record(f"failed: supervisor error: {type(e).__name__}: {e}".splitlines()[0][:300])
      self.phase = "failed"
    self.supervisor.finished(self)

  def _loop(self):
    run = RunDir(self.run_dir)
    while True:
      state = (run.read_status() or {}).get("state")
      if state == "done":
        return self.record("done")
      if self.attempts >= self.max_attempts:
        return self.record(f"gave up after {self.attempts} attempts")
      if run.lock_held():              # another trainer (a zombie, a second launcher) has it
        self.record("waiting: held by another trainer")
        time.sleep(BUSY_WAIT_S)
        continue
      self.attempts += 1
      code = self.attempt()
      if code == BUSY_EXIT_CODE:       # lost the race for the lock: not an attempt
        self.attempts -= 1
        time.sleep(BUSY_WAIT_S)
      elif code is None:               # no slice yet: not an attempt either
        self.attempts -= 1
      elif code == 0:
        return self.record("done")
      elif code > 0 and code != PREEMPTED:   # the trainer's own verdict (NaN, bad config)
        return self.record("failed", exit_code=code)
      else:                            # preempted, killed (OOM, SIGBUS), or its node died
        self.last = ("node or worker lost" if code == LOST else "preempted"
                     if code in (PREEMPTED, -signal.SIGTERM) else f"killed by signal {-code}")
        self.record(f"retrying ({self.last})")

  def attempt(self) -> int | None:
    """One attempt's outcome: the first non-zero exit code of its processes (LOST when a
    node or worker died, which wins: the others then fail for want of it), 0 when all
    finished, None when its TPU slice could not be reserved yet."""
    placement = self.request.placement()
    env = trainer_env(self.request)
    cpu_only = not (self.request.gpus or self.request.tpu)
    pin = int(self.request.cpus) if cpu_only and self.request.cpus == int(self.request.cpus) else 0
    header = f"hybrid-jax ray: attempt {self.attempts}/{self.max_attempts}"
    accel = f"TPU-{placement.tpu_version.upper()}" if placement.tpu_version else None
    name = self.run_dir.name
    if placement.processes == 1:
      self.record("waiting for resources")
      ref = train_process.options(**task_options(placement.bundles[0], accel), name=name).remote(
          str(self.run_dir), env, "train.log", header + ", 1 process", pin)
      return self.wait([ref])
    group, handle = None, None
    try:
      self.record("waiting for a placement group")
      if placement.tpu_topology:
        from ray.util import tpu as ray_tpu
        try:
          handle = ray_tpu.slice_placement_group(
              placement.tpu_topology, placement.tpu_version, resources_per_bundle=placement.bundles[0],
              num_slices=placement.slices)
        except TimeoutError:
          self.record("waiting for a TPU slice")
          return None
        group = handle.placement_group
      else:
        group = placement_group(placement.bundles, strategy=placement.strategy)
      while not ray.wait([group.ready()], timeout=10)[0]:
        pass
      table = ray.util.placement_group_table(group)
      self.nodes = [table["bundles_to_node_id"][i] for i in range(placement.processes)]
      at = lambda i: PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)
      ip, port = ray.get(node_address.options(num_cpus=0, scheduling_strategy=at(0)).remote())
      refs = []
      for i, bundle in enumerate(placement.bundles):
        extra = {"HYBRID_JAX_COORDINATOR": f"{ip}:{port}",
                 "HYBRID_JAX_NUM_PROCESSES": str(placement.processes),
                 "HYBRID_JAX_PROCESS_ID": str(i)}
        if placement.slices > 1:       # multislice: the slices talk over DCN through MEGASCALE
          from ray.util.tpu import get_tpu_coordinator_env_vars
          extra |= get_tpu_coordinator_env_vars(ip, placement.slices, i // placement.hosts_per_slice)
        refs.append(train_process.options(**task_options(bundle, accel), name=f"{name}#{i}",
                                          scheduling_strategy=at(i)).remote(
            str(self.run_dir), {**env, **extra}, "train.log" if i == 0 else f"train.{i}.log",
            f"{header}, process {i} of {placement.processes}", pin))
      self.record(f"training on {placement.processes} processes")
      return self.wait(refs)
    finally:
      if handle is not None:
        handle.shutdown()
      elif group is not None:
        remove_placement_group(group)

  def _trainer_started(self, since: float) -> bool:
    """Whether a trainer marked the run started (status.json) since ``since``: Ray does
    not tell a task's owner when a queued task starts."""
    try:
      return (self.run_dir / "status.json").stat().st_mtime >= since
    except OSError:
      return False

  def wait(self, refs: list) -> int:
    first, lost, pending, cancelled_at = 0, False, list(refs), None
    since = time.time() - 1.0
    while pending:
      done, pending = ray.wait(pending, num_returns=1, timeout=5)
      if self.phase == "waiting for resources" and self._trainer_started(since):
        self.record("training")
      for ref in done:
        try:
          code = ray.get(ref)
        except ray.exceptions.TaskCancelledError:
          code = PREEMPTED
        except ray.exceptions.RayError:    # the node, the worker or its raylet died
          code, lost = LOST, True
        first = first or code
        if code and pending and cancelled_at is None:   # the others would wait in a collective
          cancelled_at = time.monotonic()
          for other in pending:
            ray.cancel(other)
      if cancelled_at is not None and pending and time.monotonic() - cancelled_at > CANCEL_GRACE_S:
        for other in pending:
          ray.cancel(other, force=True)
    return LOST if lost else first


@ray.remote(num_cpus=0, max_restarts=-1, max_concurrency=8)
class Supervisor:
  """The runs of one sweep root, each on its own thread."""

  def __init__(self, root: str, name: str):
    self.root, self.name = Path(root), name
    self.lock = threading.Lock()
    self.runs: dict[str, _Run] = {}
    self.idle_since = time.monotonic()
    for entry in self._read_list().values():   # a restart: take up what was running
      self._start(entry, attempts=read_run_file(entry["run_dir"]).get("attempts", 0))
    threading.Thread(target=self._exit_when_idle, daemon=True).start()

  def add(self, entries: list[dict]) -> dict[str, str]:
    """Start the runs not already supervised; {run name: "attached" or "started"}."""
    out = {}
    with self.lock:
      for entry in entries:
        name = Path(entry["run_dir"]).name
        if name in self.runs and not terminal(self.runs[name].phase):
          out[name] = "attached"
        else:
          self._start(entry, attempts=0)
          out[name] = "started"
      self._write_list()
    return out

  def view(self) -> dict[str, dict]:
    """{run name: phase, attempts, max_attempts, last, nodes} of every run it has."""
    with self.lock:
      return {n: dict(phase=r.phase, attempts=r.attempts, max_attempts=r.max_attempts,
                      last=r.last, nodes=r.nodes) for n, r in self.runs.items()}

  def finished(self, run: _Run):
    with self.lock:
      self._write_list()
      if all(terminal(r.phase) for r in self.runs.values()):
        self.idle_since = time.monotonic()

  def _start(self, entry: dict, attempts: int):
    run = _Run(self, entry["run_dir"], entry["request"], entry["max_attempts"], attempts)
    self.runs[run.run_dir.name] = run
    run.thread.start()

  def _read_list(self) -> dict:
    try:
      return json.loads((self.root / LIST_FILE).read_text())
    except (OSError, ValueError):
      return {}

  def _write_list(self):
    """The runs still to supervise, for a restarted supervisor."""
    atomic_write_text(self.root / LIST_FILE, json.dumps(
        {n: r.entry for n, r in self.runs.items() if not terminal(r.phase)}, indent=1) + "\n")

  def _exit_when_idle(self):
    while True:
      time.sleep(5)
      with self.lock:
        idle = all(terminal(r.phase) for r in self.runs.values())
        if idle and time.monotonic() - self.idle_since > IDLE_EXIT_S:
          ray.kill(ray.get_runtime_context().current_actor, no_restart=True)
          return
