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
in docs/benchmarks.md: one 6-round d256-B4 run gave 1.19 where its two settled rounds gave 1.31).

A one-shot project worker per shape runs first: it puts the step in the persistent
compilation cache, which the timed project worker loads it from (a worker that compiles
the step itself runs it slower at the toy shapes: ``--cold`` times that too), and, unless
``--no-breakdown``, it prints the breakdown (``train_measure``: op time by model scope, the
loop's host-side work, a checkpoint save). The workers and their protocol are in
``train_workers``, the summary of the rows in ``train_report``.

Each shape sets its keys on the toy default, or on ``--config FILE``'s config; the
``--config.KEY=VALUE`` overrides come last, and every worker and peer builds the same config.
"""

import json
import os
import sys

from hybrid_jax import overrides
from hybrid_jax.bench import BenchError, add_config, run_config
# make_step and project_step_seconds are imported from here by the other benches and tests.
from hybrid_jax.bench.train_measure import (  # noqa: F401
    SHAPES, make_step, project_step_seconds, shape_config, step_memory)
from hybrid_jax.bench.train_report import report, saved_rows, summarize
from hybrid_jax.bench.train_workers import (
    PEER_MODULE, Measured, config_argv, one_core, peer_args, project_command, project_row,
    thread_env, torch_available, worker)
from hybrid_jax.cli_args import ArgumentParser, usage
from hybrid_jax.train import local_processes
from hybrid_jax.xla_cache import use_persistent_compilation_cache

DEFAULT_SHAPES = "toy,d256"
PROG = "hybrid-jax bench train"


def sides(shape, a, peer: bool, compiled) -> list[tuple[str, callable]]:
  """(name, start) of every side timed for ``shape``: the project first (the ratios'
  numerator), then its variants and the peers."""
  cfg = shape_config(shape, a.config, a.overrides)
  project = project_command(shape, "--serve", *config_argv(a.config, a.overrides))
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
  p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0], usage=usage(
      PROG, "[--config FILE]", overrides.USAGE, "[--shapes SHAPES]", "[--rounds N]",
      "[--steps N]", "[--warmup-rounds N]", "[--threads N]", "[--processes N]", "[--peer]",
      "[--compile-shapes SHAPES]", "[--donation]", "[--cold]", "[--plain-dots]",
      "[--no-breakdown]", "[--json FILE]", "[--summarize JSON]"))
  add_config(p, "the toy default, hybrid_jax/configs/default.py; each shape sets its keys")
  p.add_argument("--shapes", default=DEFAULT_SHAPES, metavar="SHAPES",
                 help=f"comma-separated, or 'all': {', '.join(SHAPES)}")
  p.add_argument("--rounds", type=int, default=20, metavar="N",
                 help="rounds of one block of steps per side, interleaved (ratios: median "
                      "over rounds)")
  p.add_argument("--steps", type=int, default=5, metavar="N", help="timed steps per block (median)")
  p.add_argument("--warmup-rounds", type=int, default=3, metavar="N",
                 help="rounds run first and left out of the ratios: on a shared host the "
                      "first rounds after the workers start ran slower, unevenly between sides")
  p.add_argument("--threads", type=int, default=0, metavar="N",
                 help="threads of both sides: 1, or 0 for every core")
  p.add_argument("--processes", type=int, default=1, metavar="N",
                 help="the project side as this many single-threaded processes, one per core, "
                      "data parallel (as `hybrid-jax train` runs under HYBRID_JAX_COORDINATOR); "
                      "1: one process on every core")
  p.add_argument("--peer", action="store_true", help="also time the PyTorch peer (needs torch)")
  p.add_argument("--compile-shapes", default="d256", metavar="SHAPES",
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
  p.add_argument("--json", default=None, metavar="FILE",
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
  a, a.overrides = _parser().parse_known_args(argv)
  run_config(a.config, a.overrides)     # a mistake: one line here, not in a worker
  if a.summarize:
    print(json.dumps(summarize(saved_rows(a.summarize)), indent=2))
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
  odd = [s for s in shapes
         if shape_config(s, a.config, a.overrides).train.batch_size % a.processes]
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
      cfg = shape_config(shape, a.config, a.overrides)
      print(json.dumps(dict(shape=shape, memory=[step_memory(cfg, d) for d in (False, True)])),
            flush=True)
  use_persistent_compilation_cache()          # the workers share it (they inherit the variable)
  same_config = config_argv(a.config, a.overrides)
  rows, breakdowns = [], []
  for shape in shapes:
    # A one-shot worker first (with the breakdown: the profiler stays out of the timed ones):
    # it puts the step in the compilation cache, which the timed project worker loads it from.
    row = dict(project_row(shape, 1 if a.no_breakdown else a.steps, a.threads,
                           breakdown_=not a.no_breakdown, extra=same_config), side="breakdown")
    if not a.no_breakdown:
      breakdowns.append(row)
      print(json.dumps(row), flush=True)
    if a.plain_dots:              # its own program in the cache too: not a cold worker
      project_row(shape, 1, a.threads, extra=["--plain-dots", *same_config])
    cfg = shape_config(shape, a.config, a.overrides)
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
  report(rows, breakdowns, a.json)
  return 0


if __name__ == "__main__":
  try:
    sys.exit(main())
  except BenchError as e:
    print(f"hybrid-jax bench train: error: {e}", file=sys.stderr)
    sys.exit(2)
