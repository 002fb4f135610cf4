"""``hybrid-jax plan --topology T [--config FILE] [--config.k=v ...]`` and
``hybrid-jax sweep plan SWEEP_FILE --topology T``: compile each run's train step for the
topology (no accelerator needed), print a table and write one JSON line per run."""

import hashlib
import json
import os
import sys
from pathlib import Path

import ml_collections

from hybrid_jax import overrides
from hybrid_jax.cli_args import ArgumentParser, usage
from hybrid_jax.errors import UserError
from hybrid_jax.run.config import EXECUTION_KEYS


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
  from hybrid_jax.plan.targets import TargetError, target  # lazy: after _quiet_libtpu()
  try:
    return target(name)
  except TargetError as e:
    _die(prog, str(e))


def _quiet_libtpu():
  """libtpu looks for TPU hardware and metadata at import; a planning host has neither.
  Imports marked "lazy: after _quiet_libtpu()" load JAX, so they wait for this."""
  os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
  os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5p-8")
  os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  os.environ.setdefault("JAX_PLATFORMS", "cpu")


# What the compile ignores: how batches are made and saves written (the run layer's
# EXECUTION_KEYS), the data's files (hashed as their defaults, so plans made before a corpus
# was named still match) and their fingerprint; a key the schema gained after the committed
# plans counts only when set away from its default. (A tokenizer's vocabulary is
# model.vocab_size, which is hashed.)
HASHED_AS = {"data.corpus": "", "data.tokenizer": "byte"}
UNHASHED = EXECUTION_KEYS + ("derived.data_fingerprint",)
UNHASHED_AT_DEFAULT = {"model.swa_block_sizes": None}


def config_hash(cfg, target) -> str | None:
  """What a record was planned from: the resolved config (less what the compile ignores) and
  the target."""
  if cfg is None:
    return None
  d = cfg.to_dict()
  sections = lambda paths: (((d.get(p.split(".")[0]) or {}), p.split(".")[1]) for p in paths)
  for section, key in sections(UNHASHED):
    section.pop(key, None)
  for (section, key), value in zip(sections(HASHED_AS), HASHED_AS.values()):
    if key in section:
      section[key] = value
  for (section, key), default in zip(sections(UNHASHED_AT_DEFAULT), UNHASHED_AT_DEFAULT.values()):
    if key in section and section[key] == default:
      section.pop(key)
  text = ml_collections.ConfigDict(d).to_json(sort_keys=True)
  return hashlib.sha256((text + target.name).encode()).hexdigest()[:16]


def earlier_records(out_path: Path) -> dict[str, dict]:
  """Records of an earlier plan by run name: from ``OUT.partial`` (interrupted) else ``OUT``.
  Unreadable lines are skipped: they are planned again."""
  for path in (Path(str(out_path) + ".partial"), out_path):
    if path.exists():
      found = {}
      for line in path.read_text().splitlines():
        try:
          rec = json.loads(line)
          found[rec["run"]] = rec
        except (ValueError, KeyError, TypeError):
          continue
      return found
  return {}


def run_plans(prog, named_runs, target, out_path, search=True, log=print, resume=False) -> list[dict]:
  """Plan every (name, resolved config or None, error) in order; each record is written as
  soon as it exists (to ``out_path.partial``, renamed when the grid is done), so an
  interrupted grid loses at most the run being compiled when ``--resume`` is given again."""
  from hybrid_jax.plan.fit import Compiler, plan_run  # lazy: after _quiet_libtpu()
  from hybrid_jax.plan.report import host_model, record, table, totals, with_input  # lazy: after _quiet_libtpu()
  compiler = Compiler(target, log=lambda m: log(f"{prog}: {m}"))
  records = []
  partial = Path(str(out_path) + ".partial")
  partial.parent.mkdir(parents=True, exist_ok=True)
  earlier = earlier_records(out_path) if resume else {}
  kept = 0
  with open(partial, "w") as f:
    for i, (name, cfg, error) in enumerate(named_runs):
      key = config_hash(cfg, target)
      old = earlier.get(name)
      was_kept = cfg is not None and old is not None and old.get("config_hash") == key
      if was_kept:
        rec, kept = old, kept + 1
      elif cfg is None:
        rec = dict(record(name, None, None, target, error), config_hash=key)
      else:
        rec = dict(record(name, cfg, plan_run(cfg, compiler, search), target), config_hash=key)
      rec = with_input(rec, cfg, target)      # kept records too: the host model is not compiled
      records.append(rec)
      f.write(json.dumps(rec) + "\n")
      f.flush()
      os.fsync(f.fileno())
      line = (rec["status"] + (f": {rec['reason']}" if rec.get("reason") else "")
              + (", input-bound" if rec.get("input_bound") else "")
              + (f" (input not measured: {rec['input_error']})" if rec.get("input_error") else "")
              + (" (kept from before)" if was_kept else ""))
      log(f"{prog}: [{i + 1}/{len(named_runs)}] {name}: {line}")
  os.replace(partial, out_path)
  tot = totals(records)
  print(table(records))
  print(f"{prog}: {tot['runs']} runs on {target.name}: {tot['fit']} fit "
        f"({tot['fit_with_change']} with a change), {tot['do_not_fit']} do not fit, "
        f"{tot['do_not_compile']} do not compile, {tot['invalid']} invalid; "
        f"{tot['chip_hours']:.4g} chip-hours for the {tot['fit']} that fit "
        f"({tot['tokens']:.3g} tokens, {tot['model_flops']:.3g} model FLOPs); "
        f"{tot['input_bound']} input-bound ({host_model(records)}); "
        f"{compiler.compiles} compiles" + (f", {kept} records kept from before" if resume else "")
        + f"; wrote {out_path}")
  return records


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
  _quiet_libtpu()
  from hybrid_jax.resolve import resolve  # lazy: after _quiet_libtpu()
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
  _quiet_libtpu()
  config_overrides = overrides.parse(rest, command="sweep plan")
  from hybrid_jax.launch.grid import SweepError, load_sweep, plan  # lazy: after _quiet_libtpu()
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
