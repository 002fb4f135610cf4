"""``hybrid-jax train``: train one run, or resume it from its last checkpoint, with the
standard hooks: evaluation during training (``eval.every``) and the training curves at the
end. It sits above ``train/``, ``eval/`` and ``plot/`` so that the loop imports neither.

Flags are ml_collections config-file flags (absl): ``--config FILE`` (default: the toy CPU
config) and overrides such as ``--config.model.window=64``; ``--config.a.b=None`` unsets an
optional field (e.g. ``train.steps``), which absl's typed parsers cannot express.
"""

import os
import sys
from pathlib import Path

from absl import flags
from ml_collections import config_flags

from hybrid_jax.cli_args import unset, unset_overrides
from hybrid_jax.core.hooks import Hook
from hybrid_jax.errors import UserError, one_line

# The trainer, evaluation, figures and resolve import JAX or matplotlib (seconds, measured:
# `train --help` takes 0.6 s with them deferred, over 10 s without), so the functions that
# need them import them: help and flag errors stay instant.

PROG = "hybrid-jax train"
DESCRIPTION = "Train one run, or resume it from its last checkpoint."
DEFAULT_CONFIG = str(Path(__file__).parent / "configs" / "default.py")
SWITCHES = {"--quiet": "Print no progress bar (it is shown only on a terminal anyway)."}


class CurvesAtEnd(Hook):
  """Writes curves.png (loss and answer accuracy against tokens) when the run is done."""

  def end(self, run):
    from hybrid_jax.plot.curves import write_training_curves   # lazy: matplotlib, see above
    write_training_curves(run)


def standard_hooks(cfg) -> tuple[Hook, ...]:
  """What a train command does besides training: evaluation at ``eval.every`` (when set)
  and the end-of-run curves."""
  from hybrid_jax.eval.evaluate import TrainingEval   # lazy: JAX, see above
  return ((TrainingEval(),) if cfg.eval.every else ()) + (CurvesAtEnd(),)


def train(cfg, workdir, **kwargs) -> dict:
  """``hybrid_jax.train.loop.train`` with the standard hooks: the run a command makes."""
  from hybrid_jax.resolve import ensure_resolved   # lazy: JAX, see above
  from hybrid_jax.train import distributed, loop, precompile
  cfg = ensure_resolved(cfg)
  distributed.initialize()      # before the note below asks JAX for its backend (multi-process jobs)
  if kwargs.get("progress") is not False and distributed.is_primary():
    # the first step can take a while: say why
    print(f"hybrid-jax: {precompile.first_step_note(cfg)}", file=sys.stderr, flush=True)
  if precompile.wanted():       # XLA:CPU runs a step it loaded faster than one it compiled
    precompile.in_child(cfg)
  return loop.train(cfg, workdir, hooks=standard_hooks(cfg), **kwargs)


def _define(fv, argv):
  config_flags.DEFINE_config_file("config", default=DEFAULT_CONFIG, flag_values=fv,
                                  help_string="Config file defining get_config().", sys_argv=argv)
  flags.DEFINE_string("workdir", None, "Run directory (created; resumed if it exists).", flag_values=fv)
  flags.DEFINE_string("coordinator", None, "Multi-process job: HOST:PORT of process 0.", flag_values=fv)
  flags.DEFINE_integer("num_processes", None, "Multi-process job: number of processes.", flag_values=fv)
  flags.DEFINE_integer("process_id", None, "Multi-process job: this process's index.", flag_values=fv)


def _flat(prefix, d):
  for k, v in d.items():
    if isinstance(v, dict):
      yield from _flat(f"{prefix}{k}.", v)
    else:
      yield f"{prefix}{k}", v


def help_text(argv) -> str:
  """Usage, the flags with their defaults, and every config key with its default value."""
  fv = flags.FlagValues()
  config_file = next((a.split("=", 1)[1] for a in argv if a.startswith("--config=")), None)
  if config_file is None and "--config" in argv and argv.index("--config") + 1 < len(argv):
    config_file = argv[argv.index("--config") + 1]
  parse_argv = [PROG] + ([f"--config={config_file}"] if config_file else [])
  _define(fv, parse_argv)
  lines = [f"usage: {PROG} --workdir DIR [--config FILE] [--config.SECTION.KEY=VALUE ...] "
           "[--local_processes N] [--quiet]",
           "", DESCRIPTION,
           "", "flags:"]
  defaults = dict(config=config_file or "the toy CPU config, hybrid_jax/configs/default.py",
                  workdir="none: required", coordinator="none: one process",
                  num_processes="none: one process", process_id="none: one process")
  for name, default in defaults.items():
    lines.append(f"  --{name}: {fv[name].help} (default: {default})")
  lines.append(f"  --local_processes: {LOCAL_PROCESSES_HELP} (default: 1)")
  lines += [f"  {k}: {v}" for k, v in SWITCHES.items()]
  lines += ["  -h, --help: Show this message and exit.", "",
            "config keys (override with --config.KEY=VALUE; defaults from the config file):"]
  try:
    fv(parse_argv)
    lines += [f"  {k} = {v!r}" for k, v in _flat("", fv.config.to_dict())]
  except Exception as e:   # a config file that fails to load still gets the flags' help
    lines.append(f"  (the config file cannot be loaded: {one_line(e.__cause__ or e)})")
  return "\n".join(lines)


def parse_train_flags(argv: list[str]):
  """(config, workdir) from ``--config FILE --config.a.b=v --workdir DIR``; UserError on bad flags."""
  argv, unsets = unset_overrides(argv)
  full_argv = [PROG] + argv
  fv = flags.FlagValues()
  try:
    _define(fv, full_argv)
    fv(full_argv)
    config = fv.config
    config.keys()  # a config file that failed to load raises only when first used
    unset(config, unsets)
  except flags.Error as e:
    raise UserError(one_line(e)) from None
  except (KeyError, AttributeError) as e:
    raise UserError(f"unknown config key in an override: {one_line(e)}") from None
  except Exception as e:  # a config file that fails to load
    raise UserError(f"cannot load config: {one_line(e.__cause__ or e)}") from None
  if not fv.workdir:
    raise UserError("--workdir is required")
  if fv.coordinator is not None:    # handed to hybrid_jax.train.distributed through its variables
    if fv.num_processes is None or fv.process_id is None or not 0 <= fv.process_id < fv.num_processes:
      raise UserError("--coordinator needs --num_processes N and --process_id I with 0 <= I < N")
    from hybrid_jax.train.distributed import ENV   # lazy: JAX, see above
    os.environ.update(dict(zip(ENV, (fv.coordinator, str(fv.num_processes), str(fv.process_id)))))
  return config, fv.workdir


LOCAL_PROCESSES_HELP = ("CPU: run as N single-threaded processes, one per core, data parallel "
                        "(faster than one process on every core at d_model >= 256)")


def split_local_processes(argv: list[str]) -> tuple[int, list[str]]:
  """(N of ``--local_processes N`` or ``=N``, default 1; the other arguments)."""
  n, rest, i = None, [], 0
  while i < len(argv):
    a = argv[i]
    if a == "--local_processes" or a.startswith("--local_processes="):
      value = a.split("=", 1)[1] if "=" in a else (argv[i + 1] if i + 1 < len(argv) else "")
      i += 1 if "=" in a else 2
      try:
        n = int(value)
      except ValueError:
        raise UserError(f"--local_processes needs an integer; got {value!r}") from None
      continue
    rest.append(a)
    i += 1
  if n is not None and any(a == "--coordinator" or a.startswith("--coordinator=") for a in rest):
    raise UserError("--local_processes starts its own processes; it takes no --coordinator")
  return (1 if n is None else n), rest


def main(argv) -> int:
  argv = list(argv)
  if "-h" in argv or "--help" in argv:
    print(help_text(argv))
    return 0
  quiet = "--quiet" in argv
  n_local, argv = split_local_processes(argv)
  config, workdir = parse_train_flags([a for a in argv if a not in SWITCHES])
  from hybrid_jax.resolve import resolve   # lazy: JAX, see above
  from hybrid_jax.train import loop
  config = resolve(config)              # once per train command; a ConfigError (a UserError) before anything is written
  if n_local != 1:
    from hybrid_jax.train import local_processes
    local_processes.check(n_local, config)
    return local_processes.run(argv, n_local)
  try:
    status = train(config, workdir, progress=False if quiet else None)
  except loop.Preempted as e:
    print(f"hybrid-jax: {e}", file=sys.stderr)
    return loop.PREEMPTED_EXIT_CODE
  print(f"hybrid-jax: run {workdir}: {status['state']} at step {status['step']}/{status['total_steps']}")
  return 0
