"""``hybrid-jax plan --topology T [--config FILE] [--config.KEY=VALUE ...]`` and
``hybrid-jax sweep plan SWEEP_FILE --topology T``: compile each run's train step for the
topology (no accelerator needed), print a table and write one JSON line per run
(``hybrid_jax.plan.runs``)."""

import sys
from pathlib import Path

from hybrid_jax import overrides
from hybrid_jax.cli_args import ArgumentParser, usage
from hybrid_jax.errors import UserError
from hybrid_jax.plan.runs import quiet_libtpu, run_plans


def _die(prog: str, message: str):
  raise UserError(f"{prog.removeprefix('hybrid-jax ')}: {message}")


OPTIONS = ("[--out OUT]", "[--no-search]", "[--resume]")     # _common's, in the usage lines
OVERRIDES_HELP = ("--config.KEY=VALUE overrides {what} (keys: hybrid_jax/configs/base.py; "
                  "e.g. --config.train.steps=20).")


def _common(p: ArgumentParser):
  p.add_argument("--topology", required=True, metavar="T",
                 help="what to compile for: a TPU slice CHIP:GRID (v5p:2x2x1, v5e:2x2, v5e:1x1 for one "
                 "chip, v6e:2x2, v4:2x2x1) or GPUs of one host GPU:N (h100:8, h200:1)")
  p.add_argument("--out", default=None, help="JSON lines file (default: plan.jsonl, or "
                 "<sweep>.<topology>.plan.jsonl for a sweep)")
  p.add_argument("--no-search", action="store_true",
                 help="report a run that does not fit without looking for the change that fits")
  p.add_argument("--resume", action="store_true",
                 help="keep the records of an interrupted or earlier plan (OUT.partial, else OUT) "
                 "whose run and config are unchanged, and compile only the rest")


def _target(prog, name):
  """The target's devices; its TargetError (unknown name, missing libtpu or CUDA plugin, with
  the pip command) becomes the CLI's one-line UserError."""
  from hybrid_jax.plan.targets import TargetError, target  # lazy: after quiet_libtpu()
  try:
    return target(name)
  except TargetError as e:
    _die(prog, str(e))


def main(argv) -> int:
  """``hybrid-jax plan``: one run."""
  prog = "hybrid-jax plan"
  p = ArgumentParser(prog=prog, description="Compile one run's train step for a topology and "
                     "report its memory, FLOPs, step time and cost.",
                     usage=usage(prog, "--topology T", "[--config FILE]",
                                 overrides.USAGE, *OPTIONS),
                     epilog=OVERRIDES_HELP.format(what="the run's config"))
  _common(p)
  p.add_argument("--config", default=None, metavar="FILE", help="config file defining "
                 "get_config() (default: the toy CPU config, hybrid_jax/configs/default.py)")
  args, rest = p.parse_known_args(argv)
  quiet_libtpu()
  from hybrid_jax.resolve import resolve  # lazy: after quiet_libtpu()
  config = overrides.config_from(args.config, rest, command="plan")
  cfg = resolve(config)                  # a ConfigError is a UserError: one line
  target = _target(prog, args.topology)
  records = run_plans(prog, [(f"{cfg.model.size}:{cfg.model.pattern}", cfg, None)], target,
                      Path(args.out or "plan.jsonl"), not args.no_search,
                      log=lambda m: print(m, file=sys.stderr, flush=True), resume=args.resume)
  return 0 if records[0].get("fits") else 1


def main_sweep_plan(argv) -> int:
  """``hybrid-jax sweep plan``: every grid point of a sweep file."""
  prog = "hybrid-jax sweep plan"
  p = ArgumentParser(prog=prog, description="Compile every run of a sweep file for a topology "
                     "and report each one's memory, FLOPs, step time and the grid's cost.",
                     usage=usage(prog, "SWEEP_FILE", "--topology T", overrides.USAGE, *OPTIONS),
                     epilog=OVERRIDES_HELP.format(what="every run's config"))
  p.add_argument("sweep_file", help="A Python file defining get_sweep().")
  _common(p)
  args, rest = p.parse_known_args(argv)
  quiet_libtpu()
  config_overrides = overrides.parse(rest, command="sweep plan")
  from hybrid_jax.launch.grid import SweepError, load_sweep, plan  # lazy: after quiet_libtpu()
  try:
    runs = plan(load_sweep(args.sweep_file), config_overrides)
  except SweepError as e:
    _die(prog, str(e))
  target = _target(prog, args.topology)
  out = args.out or f"{Path(args.sweep_file).stem}.{args.topology.replace(':', '_')}.plan.jsonl"
  records = run_plans(prog, [(r.name, r.resolved, r.error) for r in runs], target, Path(out),
                      not args.no_search, log=lambda m: print(m, file=sys.stderr, flush=True),
                      resume=args.resume)
  return 0 if all(r.get("fits") for r in records) else 1
