"""The ``hybrid-jax`` command: ``train`` and ``bench`` (more subcommands join with their issues).

``train`` takes ml_collections config-file flags: ``--config FILE`` (default: the toy CPU
config) and overrides such as ``--config.model.window=64``.
"""

import argparse
import sys
from pathlib import Path

DEFAULT_CONFIG = str(Path(__file__).parent / "configs" / "default.py")


def _die(message: str, code: int = 2):
  print(f"hybrid-jax: error: {message}", file=sys.stderr)
  raise SystemExit(code)


def _one_line(e: BaseException) -> str:
  text = " ".join(str(e).replace("\\n", " ").split()).replace("'", "").replace("\\", "")
  return (text[:400] + "...") if len(text) > 400 else text or type(e).__name__


def parse_train_flags(argv: list[str]):
  """(config, workdir) from ``--config FILE --config.a.b=v --workdir DIR``; one-line errors.

  ``--config.a.b=None`` unsets an optional field (e.g. ``train.steps``), which absl's typed
  parsers cannot express.
  """
  from absl import flags
  from ml_collections import config_flags

  unset = [a.split("=", 1)[0][len("--config."):] for a in argv
           if a.startswith("--config.") and a.split("=", 1)[-1] in ("None", "none")]
  argv = [a for a in argv if not (a.startswith("--config.") and a.split("=", 1)[-1] in ("None", "none"))]
  full_argv = ["hybrid-jax train"] + argv
  fv = flags.FlagValues()
  try:
    config_flags.DEFINE_config_file("config", default=DEFAULT_CONFIG, flag_values=fv,
                                    help_string="config file defining get_config()",
                                    sys_argv=full_argv)
    flags.DEFINE_string("workdir", None, "run directory (created; resumed if it exists)",
                        flag_values=fv)
    fv(full_argv)
    config = fv.config
    config.keys()  # a config file that failed to load raises only when first used
    for path in unset:
      *parents, leaf = path.split(".")
      node = config
      for p in parents:
        node = node[p]
      if leaf not in node:
        raise KeyError(f"unknown config key {path}")
      node[leaf] = None
  except flags.Error as e:
    _die(_one_line(e))
  except (KeyError, AttributeError) as e:
    _die(f"unknown config key in an override: {_one_line(e)}")
  except Exception as e:  # a config file that fails to load
    _die(f"cannot load config: {_one_line(e.__cause__ or e)}")
  if not fv.workdir:
    _die("--workdir is required")
  return config, fv.workdir


def cmd_train(argv):
  config, workdir = parse_train_flags(argv)
  from hybrid_jax.configs import ConfigError, resolve
  try:
    resolve(config)
  except ConfigError as e:
    _die(str(e))
  from hybrid_jax.train.loop import PREEMPTED_EXIT_CODE, Preempted, train
  from hybrid_jax.train.rundir import RunDirError
  try:
    status = train(config, workdir)
  except RunDirError as e:
    _die(str(e))
  except Preempted as e:
    print(f"hybrid-jax: {e}", file=sys.stderr)
    raise SystemExit(PREEMPTED_EXIT_CODE)
  print(f"hybrid-jax: run {workdir}: {status['state']} at step {status['step']}/{status['total_steps']}")


def cmd_bench(argv):
  from hybrid_jax import bench
  bench.main(argv)


def cmd_sweep(argv):
  from hybrid_jax.launch.cli import main as sweep_main
  raise SystemExit(sweep_main(argv))


def cmd_fit_scaling(argv):
  from hybrid_jax.analysis.scaling import main as fit_main
  raise SystemExit(fit_main(argv))


COMMANDS = {"train": (cmd_train, "train (or resume) one run"),
            "fit-scaling": (cmd_fit_scaling, "fit L(N, D) scaling laws to a collected table"),
            "sweep": (cmd_sweep, "submit a grid of runs, show its status, collect its metrics"),
            "bench": (cmd_bench, "print kernel and training speed figures")}


def _use_persistent_compilation_cache():
  """Reuse compiled programs across runs (``JAX_COMPILATION_CACHE_DIR`` overrides)."""
  import os
  os.environ.setdefault("JAX_COMPILATION_CACHE_DIR",
                        str(Path.home() / ".cache" / "hybrid_jax" / "xla"))


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  _use_persistent_compilation_cache()
  parser = argparse.ArgumentParser(prog="hybrid-jax", description=__doc__.splitlines()[0])
  parser.add_argument("command", choices=sorted(COMMANDS),
                      help="; ".join(f"{k}: {v[1]}" for k, v in COMMANDS.items()))
  if not argv or argv[0] in ("-h", "--help"):
    parser.print_help()
    return 0 if argv else 2
  args = parser.parse_args(argv[:1])
  COMMANDS[args.command][0](argv[1:])
  return 0


if __name__ == "__main__":
  sys.exit(main())
