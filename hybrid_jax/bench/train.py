"""``hybrid-jax bench train``: training tokens/s per shape, where the step's time goes, and
(``--peer``) the ratio to the same network in PyTorch, run interleaved on the same cores.

Every side (the project, torch eager, torch.compile, ...) runs in a long-lived process of
its own (``Measured``; the project's is ``--worker --serve``), so both get the same cores
(``--threads 1``: both pinned to one core by CPU affinity, the only limit XLA:CPU's thread
pool obeys; its flags alone left two busy threads). Each compiles and warms up once; then
rounds alternate one block of ``--steps`` steps per side, every other round in reverse
order, while the other sides wait off the cores. Each ratio is taken within a round, so a
shared machine's slow spells shift both sides alike, and the reported ratio is the median
over rounds. The first ``--warmup-rounds`` rounds are printed but not counted: on a 2-core
host the first 1-4 rounds after the workers started often ran slower, and not alike (figures
in the README: one 6-round d256-B4 run gave 1.19 where its two settled rounds gave 1.31).

A one-shot project worker per shape runs first: it puts the step in the persistent
compilation cache, which the timed project worker loads it from (a worker that compiles
the step itself runs it slower at the toy shapes: ``--cold`` times that too), and, unless
``--no-breakdown``, it prints the breakdown. The breakdown splits the compiled step's op
time by the named scopes the model sets (``bench.profile``), scaled to the step's wall time,
and times the host-side work the training loop does between steps: building the batch,
putting it on the device, fetching metrics at a log step, the checkpoint check; and a
checkpoint save, beside the same state saved one array per leaf (``run.packed_state``).
"""

import argparse
import importlib.util
import json
import os
import select
import statistics
import subprocess
import sys
import tempfile

import jax
import orbax.checkpoint as ocp

from hybrid_jax.bench import BenchError
from hybrid_jax.bench.profile import op_time_by_group
from hybrid_jax.bench.timing import matmul_peak_flops, median_seconds, wall_times
from hybrid_jax.cli_args import HelpFormatter
from hybrid_jax.configs.default import get_config
from hybrid_jax.data import make_source
from hybrid_jax.model.flops import model_flops_per_token
from hybrid_jax.resolve import resolve
from hybrid_jax.run import atomic_write_text
from hybrid_jax.train import distributed, local_processes, sharding
from hybrid_jax.train.checkpoint import Checkpointer
from hybrid_jax.train.state import init_state
from hybrid_jax.train.step import step_for
from hybrid_jax.xla_cache import use_persistent_compilation_cache
from pallas_kernels import cpu_matmul

PEER_MODULE = "hybrid_jax.bench.torch_peer"

# Shapes of the toy family (config overrides of the toy default).
_D256 = {"model.size": "custom", "model.d_model": 256, "model.n_layers": 4, "model.n_heads": 4,
         "model.n_kv_heads": 2, "model.window": 128, "data.seq_len": 512}
SHAPES = {
    "toy": {},                                             # d64, 4 layers, SF, w32, T256, B8
    "toy-8L": {"model.n_layers": 8},
    "toy-SSSF": {"model.pattern": "SSSF"},
    "toy-B4": {"train.batch_size": 4},
    "d256": _D256,                                         # d256, 4 layers, SF, w128, T512, B8
    "d256-SSSF": {**_D256, "model.pattern": "SSSF"},
    "d256-B4": {**_D256, "train.batch_size": 4},
}
DEFAULT_SHAPES = "toy,d256"


def shape_config(name: str):
  """The resolved config of a named shape."""
  c = get_config()
  for key, value in SHAPES[name].items():
    section, field = key.split(".")
    c[section][field] = value
  return resolve(c)


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

def make_step(cfg, donate: bool = True, mesh=None):
  """(jitted train step, initial state) of a resolved config; sharded over ``mesh`` if given."""
  graphdef, rest, state, tx, _ = init_state(cfg, mesh)
  shardings = sharding.state_shardings(mesh, state) if mesh is not None else None
  return step_for(cfg, graphdef, rest, tx, mesh=mesh, state_shardings=shardings,
                  donate=donate), state


def step_memory(cfg, donate: bool) -> dict:
  """Bytes of the compiled step (``memory_analysis``): what donation saves is the state copy
  the output would otherwise need (``aliased``), read off the compiler, not timed."""
  step_fn, state = make_step(cfg, donate)
  m = step_fn.lower(state, make_source(cfg).batch(0)).compile().memory_analysis()
  live = (m.argument_size_in_bytes + m.output_size_in_bytes - m.alias_size_in_bytes
          + m.temp_size_in_bytes)
  return dict(donate=donate, state=sum(x.nbytes for x in jax.tree.leaves(state)),
              aliased=m.alias_size_in_bytes, temps=m.temp_size_in_bytes, live=live)


def stepper(cfg, donate: bool = True, mesh=None):
  """A call that runs one train step of ``cfg`` and returns its metrics, after one compile
  step; its batches are already on the device(s) (the loop's data work is timed apart, in
  ``host_seconds``)."""
  step_fn, state = make_step(cfg, donate, mesh)
  source = make_source(cfg)
  rows = sharding.process_rows(cfg.train.batch_size)          # this process's share
  put = ((lambda b: sharding.global_batch(mesh, b)) if mesh is not None else jax.device_put)
  batches = [put(source.batch(s, rows=rows)) for s in range(11)]
  carry = dict(state=state, i=0)

  def one_step():
    carry["state"], metrics = step_fn(carry["state"], batches[carry["i"] % len(batches)])
    carry["i"] += 1
    return metrics
  jax.block_until_ready(one_step())             # compiles; the first collectives start gloo
  distributed.quiet_gloo_threads()              # as the training loop does after its first step
  return one_step


def project_step_seconds(cfg, steps: int, donate: bool = True, mesh=None) -> float:
  """Median wall time of ``steps`` train steps after one compile step (``stepper``)."""
  return median_seconds(stepper(cfg, donate, mesh), reps=steps, warmup=0)


def serve(one_step, emit) -> None:
  """The block loop of a long-lived worker (``Measured``): each line ``n`` on stdin runs
  ``n`` timed steps, and ``emit`` gets their wall seconds; it ends at end of input."""
  for line in sys.stdin:
    emit(dict(step_s=wall_times(one_step, int(line), warmup=0)))


def host_seconds(cfg, reps: int = 20) -> dict:
  """Median seconds of the host-side work of one training-loop step (loop.py's order)."""
  step_fn, state = make_step(cfg)
  source = make_source(cfg)
  mesh = sharding.make_mesh(cfg.mesh)
  counter = iter(range(10 ** 9))
  out = dict(data_batch=median_seconds(lambda: source.batch(next(counter)), reps),
             device_put=median_seconds(lambda: sharding.global_batch(mesh, source.batch(0)), reps))
  out["device_put"] = max(out["device_put"] - out["data_batch"], 0.0)
  state, metrics = step_fn(state, jax.device_put(source.batch(0)))
  fetch = median_seconds(lambda: {k: float(v) for k, v in jax.device_get(metrics).items()}, reps)
  out["metrics_per_step"] = fetch / cfg.train.log_every      # fetched at log steps only
  with tempfile.TemporaryDirectory() as d:
    ckpt = Checkpointer(os.path.join(d, "checkpoints"), cfg.checkpoint, cfg.derived.steps)
    off_steps = iter(s for s in range(2, 10 ** 9) if s % cfg.checkpoint.every and s & (s - 1))
    out["checkpoint_check"] = median_seconds(lambda: ckpt.save(next(off_steps), state), reps, 0)
    # A save as the loop makes it (packed when small: ``run.packed_state``), and, as the
    # baseline in the same run, the same state saved one array per leaf (orbax's own form).
    saves = iter(range(10 ** 9, 2 * 10 ** 9))
    out["checkpoint_save"] = median_seconds(     # the whole save (the loop waits for less)
        lambda: (ckpt.save(next(saves), state, True), ckpt.wait()), 5)
    out["checkpoint_save_per_array"] = median_seconds(lambda: ckpt.manager.save(
        next(saves), args=ocp.args.StandardSave(state), force=True), 5)
    ckpt.close()
  return out


def breakdown(cfg, step_s: float) -> dict:
  """Milliseconds per step by op group (op-time shares scaled to the wall step) and of the
  host-side work between steps."""
  step_fn, state = make_step(cfg, donate=False)   # profiled repeatedly on the same state
  batch = jax.device_put(make_source(cfg).batch(0))
  jax.block_until_ready(step_fn(state, batch))
  groups = op_time_by_group(step_fn, state, batch)
  total = sum(groups.values())
  device = {g: round(1e3 * step_s * t / total, 2) for g, t in groups.items()}
  host = {k: round(1e3 * v, 3) for k, v in host_seconds(cfg).items()}
  return dict(device_ms=device, host_ms=host)


def model_flops_per_s(cfg, step_s: float) -> float:
  return model_flops_per_token(cfg) * cfg.train.batch_size * cfg.data.seq_len / step_s


def worker(argv) -> dict:
  """One project measurement: prints and returns a JSON row. ``--serve``: a long-lived
  worker instead, which prints its row once compiled and then times blocks of steps on
  request (``serve``)."""
  p = argparse.ArgumentParser()
  p.add_argument("--shape", required=True)
  p.add_argument("--steps", type=int, default=10)
  p.add_argument("--no-donate", action="store_true")
  p.add_argument("--breakdown", action="store_true")
  p.add_argument("--serve", action="store_true")
  p.add_argument("--cold", action="store_true")
  p.add_argument("--plain-dots", action="store_true")
  a = p.parse_args(argv)
  cpu_matmul.set_fast_form(not a.plain_dots)  # before anything is traced
  if a.cold:                                  # compiled here, as a config's first run is
    jax.config.update("jax_enable_compilation_cache", False)
  processes = distributed.initialize()        # --processes: joined from the environment
  cfg = shape_config(a.shape)
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


# --- the driver: interleaved rounds of subprocesses ------------------------------------------

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
  cmd = [sys.executable, "-m", "hybrid_jax.bench.train", "--worker", "--shape", shape,
         "--steps", str(steps)] + (["--breakdown"] if breakdown_ else []) + list(extra)
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


def sides(shape, a, peer: bool, compiled) -> list[tuple[str, callable]]:
  """(name, start) of every side timed for ``shape``: the project first (the ratios'
  numerator), then its variants and the peers."""
  cfg = shape_config(shape)
  project = [sys.executable, "-m", "hybrid_jax.bench.train", "--worker", "--shape", shape,
             "--serve"]
  env, cpu = thread_env(a.threads), one_core(a.threads)
  out = [("project", lambda: Measured(f"project worker ({shape})", project, env, cpu,
                                      processes=a.processes))]
  if a.donation:
    out.append(("project-no-donate", lambda: Measured(
        f"project worker ({shape}, no donation)", project + ["--no-donate"], env, cpu)))
  if a.cold:
    out.append(("project-cold", lambda: Measured(
        f"project worker ({shape}, compiled in the worker)", project + ["--cold"], env, cpu)))
  if a.plain_dots:               # baseline: XLA's own dot forms (``cpu_matmul.fast_form``)
    out.append(("project-plain-dots", lambda: Measured(
        f"project worker ({shape}, plain dots)", project + ["--plain-dots"], env, cpu)))
  if a.processes > 1:             # the same run's baseline: one process on every core
    out.append(("project-1-process", lambda: Measured(
        f"project worker ({shape}, one process)", project, env, cpu)))
  if peer:
    for mode in ["eager"] + (["compile"] if shape in compiled else []):
      cmd = [sys.executable, "-m", PEER_MODULE, *peer_args(cfg), "--mode", mode, "--threads",
             str(a.threads or os.cpu_count()), "--serve"]
      out.append((f"torch-{mode}", lambda cmd=cmd, mode=mode: Measured(
          f"torch {mode} peer ({shape})", cmd, env, cpu)))
  return out


def _parser():
  p = argparse.ArgumentParser(prog="hybrid-jax bench train", description=__doc__.split("\n\n")[0],
                              formatter_class=HelpFormatter)
  p.add_argument("--shapes", default=DEFAULT_SHAPES,
                 help=f"comma-separated, or 'all': {', '.join(SHAPES)}")
  p.add_argument("--rounds", type=int, default=20,
                 help="rounds of one block of steps per side, interleaved (ratios: median "
                      "over rounds)")
  p.add_argument("--steps", type=int, default=5, help="timed steps per block (median)")
  p.add_argument("--warmup-rounds", type=int, default=3,
                 help="rounds run first and left out of the ratios: on a shared host the "
                      "first rounds after the workers start ran slower, unevenly between sides")
  p.add_argument("--threads", type=int, default=0,
                 help="threads of both sides: 1, or 0 for every core")
  p.add_argument("--processes", type=int, default=1,
                 help="the project side as this many single-threaded processes, one per core, "
                      "data parallel (as `hybrid-jax train` runs under HYBRID_JAX_COORDINATOR); "
                      "1: one process on every core")
  p.add_argument("--peer", action="store_true", help="also time the PyTorch peer (needs torch)")
  p.add_argument("--compile-shapes", default="d256",
                 help="shapes also timed under torch.compile with --peer ('' for none)")
  p.add_argument("--donation", action="store_true",
                 help="also time the step without buffer donation (its effect)")
  p.add_argument("--cold", action="store_true",
                 help="also time the step as a worker that compiles it itself gets it (a "
                      "config's first run); the project side loads it from the compilation "
                      "cache (reruns, resumes)")
  p.add_argument("--plain-dots", action="store_true",
                 help="also time the step with XLA's own dot forms, without the fast form "
                      "every CPU matmul is given (pallas_kernels.cpu_matmul): its effect")
  p.add_argument("--no-breakdown", action="store_true", help="skip the per-op profile")
  p.add_argument("--json", default=None,
                 help="also write every row and ratio to this file (default: none)")
  p.add_argument("--summarize", default=None, metavar="JSON",
                 help="time nothing: print the summary of the rows in a --json file (a "
                      "committed run's ratios, regenerated from its rows) (default: time)")
  return p


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else list(argv)
  if argv[:1] == ["--worker"]:
    worker(argv[1:])
    return 0
  a = _parser().parse_args(argv)
  if a.summarize:
    print(json.dumps(summarize(_saved_rows(a.summarize)), indent=2))
    return 0
  shapes = list(SHAPES) if a.shapes == "all" else [s for s in a.shapes.split(",") if s]
  compiled = [s for s in a.compile_shapes.split(",") if s]
  unknown = sorted(set(shapes + compiled) - set(SHAPES))
  if unknown or not shapes:
    raise BenchError(f"unknown shape(s) {', '.join(unknown) or '(none given)'}; "
                     f"known: {', '.join(SHAPES)}")
  if a.threads not in (0, 1):
    raise BenchError(f"--threads must be 0 (every core) or 1; got {a.threads}")
  if a.rounds < 1 or a.steps < 1 or a.warmup_rounds < 0:
    raise BenchError("--rounds and --steps must be >= 1, --warmup-rounds >= 0")
  cores = len(local_processes.usable_cores())
  if a.processes < 1 or a.processes > cores or (a.processes > 1 and a.threads == 1):
    raise BenchError(f"--processes must be 1..{cores} (the cores this process may use), and "
                     f"1 with --threads 1; got {a.processes}")
  odd = [s for s in shapes if shape_config(s).train.batch_size % a.processes]
  if odd:
    raise BenchError(f"--processes {a.processes} must divide the batch of shape(s) "
                     f"{', '.join(odd)}")
  peer = a.peer
  if peer and not torch_available():
    print("# --peer: torch is not installed; install the CPU wheel to compare: "
          "pip install torch --index-url https://download.pytorch.org/whl/cpu", flush=True)
    peer = False
  project_side = (f"{a.processes} single-threaded processes" if a.processes > 1
                  else f"threads {a.threads or os.cpu_count()}")
  print(f"# bench train: shapes {','.join(shapes)}, {a.rounds} round(s) x {a.steps} steps "
        f"after {a.warmup_rounds} warm-up round(s), "
        f"project: {project_side}; peer: threads {a.threads or os.cpu_count()}", flush=True)
  if a.donation:
    for shape in shapes:
      cfg = shape_config(shape)
      print(json.dumps(dict(shape=shape, memory=[step_memory(cfg, d) for d in (False, True)])),
            flush=True)
  use_persistent_compilation_cache()          # the workers share it (they inherit the variable)
  rows, breakdowns = [], []
  for shape in shapes:
    # A one-shot worker first (with the breakdown: the profiler stays out of the timed ones):
    # it puts the step in the compilation cache, which the timed project worker loads it from.
    row = dict(project_row(shape, 1 if a.no_breakdown else a.steps, a.threads,
                           breakdown_=not a.no_breakdown), side="breakdown")
    if not a.no_breakdown:
      breakdowns.append(row)
      print(json.dumps(row), flush=True)
    if a.plain_dots:              # its own program in the cache too: not a cold worker
      project_row(shape, 1, a.threads, extra=["--plain-dots"])
    cfg = shape_config(shape)
    tokens = cfg.train.batch_size * cfg.data.seq_len
    started = []
    try:
      for name, start in sides(shape, a, peer, compiled):
        started.append((name, start()))
      # Warm-up rounds (negative numbers) are printed but left out of the summary; every
      # other round in reverse order: no side always first.
      for r in range(-a.warmup_rounds, a.rounds):
        for name, side in (started if r % 2 == 0 else started[::-1]):
          step_s = side.block(a.steps)
          row = dict(side=name, shape=shape, threads=side.ready.get("threads"),
                     processes=side.ready.get("processes", 1), step_s=step_s,
                     tokens_per_s=tokens / step_s, round=r, **({"warmup": True} if r < 0 else {}))
          rows.append(row)
          print(json.dumps(row), flush=True)
    finally:
      for _, side in started:
        side.close()
  summary = summarize(rows)
  print("# summary: median over rounds of each within-round ratio")
  print(json.dumps(summary, indent=2), flush=True)
  if a.json:
    atomic_write_text(a.json, json.dumps(dict(rows=rows, breakdowns=breakdowns,
                                                 summary=summary), indent=1))
  return 0


def _saved_rows(path: str) -> list[dict]:
  """The rows of a ``--json`` file; a one-line BenchError if it is not one."""
  try:
    with open(path) as f:
      rows = json.load(f)["rows"]
    if not all({"side", "shape", "round", "tokens_per_s"} <= set(r) for r in rows):
      raise ValueError("a row lacks side, shape, round or tokens_per_s")
    counted = [r for r in rows if not r.get("warmup")]
    if not counted or ({r["shape"] for r in counted}
                       != {r["shape"] for r in counted if r["side"] == "project"}):
      raise ValueError("no counted rows, or a shape without a counted project row")
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise BenchError(f"--summarize {path}: not a bench train --json file ({e})") from None
  return rows


def summarize(rows) -> dict:
  """Per shape: the project's median tokens/s and, per other side, the median, lower quartile
  and range over rounds of project tokens/s over that side's (measured in the same round);
  warm-up rounds left out."""
  rows = [r for r in rows if not r.get("warmup")]
  out = {}
  for shape in dict.fromkeys(r["shape"] for r in rows):
    mine = [r for r in rows if r["shape"] == shape]
    proj = {r["round"]: r["tokens_per_s"] for r in mine if r["side"] == "project"}
    entry = dict(project_tokens_per_s=round(statistics.median(list(proj.values()))))
    for side in dict.fromkeys(r["side"] for r in mine if r["side"] != "project"):
      ratios = [proj[r["round"]] / r["tokens_per_s"] for r in mine
                if r["side"] == side and r["round"] in proj]
      entry[f"{side}_tokens_per_s"] = round(statistics.median(
          [r["tokens_per_s"] for r in mine if r["side"] == side]))
      entry[f"project_over_{side}"] = round(statistics.median(ratios), 3)
      entry[f"project_over_{side}_lower_quartile"] = round(
          statistics.quantiles(ratios, n=4)[0] if len(ratios) > 1 else ratios[0], 3)
      entry[f"project_over_{side}_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
    out[shape] = entry
  return out


if __name__ == "__main__":
  try:
    sys.exit(main())
  except BenchError as e:
    print(f"hybrid-jax bench train: error: {e}", file=sys.stderr)
    sys.exit(2)
