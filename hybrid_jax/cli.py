"""The ``hybrid-jax`` command: ``train``, ``sweep``, ``eval``, ``plot``, ``fit-scaling``,
``data`` and ``bench``.

``train`` takes ml_collections config-file flags: ``--config FILE`` (default: the toy CPU
config) and overrides such as ``--config.model.window=64``; ``eval`` takes the run's own
config with ``--config.eval.*`` overrides.
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

  argv, unset = _unset_overrides(argv)
  full_argv = ["hybrid-jax train"] + argv
  fv = flags.FlagValues()
  try:
    config_flags.DEFINE_config_file("config", default=DEFAULT_CONFIG, flag_values=fv,
                                    help_string="config file defining get_config()",
                                    sys_argv=full_argv)
    flags.DEFINE_string("workdir", None, "run directory (created; resumed if it exists)",
                        flag_values=fv)
    flags.DEFINE_string("coordinator", None, "multi-process job: HOST:PORT of process 0",
                        flag_values=fv)
    flags.DEFINE_integer("num_processes", None, "multi-process job: number of processes",
                         flag_values=fv)
    flags.DEFINE_integer("process_id", None, "multi-process job: this process's index",
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
  if fv.coordinator is not None:    # handed to hybrid_jax.train.distributed through its variables
    if fv.num_processes is None or fv.process_id is None or not 0 <= fv.process_id < fv.num_processes:
      _die("--coordinator needs --num_processes N and --process_id I with 0 <= I < N")
    import os
    from hybrid_jax.train.distributed import ENV
    os.environ.update(dict(zip(ENV, (fv.coordinator, str(fv.num_processes), str(fv.process_id)))))
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
  from hybrid_jax.eval.checkpoints import EvalInputError
  try:
    status = train(config, workdir)
  except (RunDirError, EvalInputError, ConfigError) as e:
    _die(str(e))
  except Preempted as e:
    print(f"hybrid-jax: {e}", file=sys.stderr)
    raise SystemExit(PREEMPTED_EXIT_CODE)
  print(f"hybrid-jax: run {workdir}: {status['state']} at step {status['step']}/{status['total_steps']}")


def _unset_overrides(argv):
  """(argv without ``--config.x=None`` flags, the dotted keys they unset)."""
  is_unset = lambda a: a.startswith("--config.") and a.split("=", 1)[-1] in ("None", "none")
  return ([a for a in argv if not is_unset(a)],
          [a.split("=", 1)[0][len("--config."):] for a in argv if is_unset(a)])


def parse_eval_flags(argv: list[str]):
  """(config, workdir) from ``--workdir RUN --config.eval.a=v``: the run's config.json with
  eval overrides (only ``eval.*`` may change: the model and data are the run's)."""
  from absl import flags
  from ml_collections import config_flags

  from hybrid_jax.eval.checkpoints import EvalInputError, load_run_config
  if any(a in ("-h", "--help") for a in argv):
    print("usage: hybrid-jax eval --workdir RUN [--config.eval.KEY=VALUE ...]\n\n"
          "Evaluates every checkpoint of RUN without a record for these settings and appends\n"
          "one line per checkpoint to RUN/eval.jsonl. Settings: the run's config.json eval\n"
          "section, then the overrides (keys: hybrid_jax/configs/base.py, section eval).")
    raise SystemExit(0)
  workdir = None
  rest = []
  for i, a in enumerate(argv):
    if a.startswith("--workdir="):
      workdir = a.split("=", 1)[1]
    elif a == "--workdir" and i + 1 < len(argv):
      workdir = argv[i + 1]
    elif not (i and argv[i - 1] == "--workdir"):
      rest.append(a)
  if not workdir:
    _die("--workdir is required")
  for a in rest:
    if not a.startswith("--config.eval."):
      _die(f"unknown flag {a.split('=', 1)[0]} (eval takes --workdir and --config.eval.* overrides)")
  try:
    config = load_run_config(workdir)
  except EvalInputError as e:
    _die(str(e))
  rest, unset = _unset_overrides(rest)
  full_argv = ["hybrid-jax eval"] + rest
  fv = flags.FlagValues()
  try:
    config_flags.DEFINE_config_dict("config", config, flag_values=fv, sys_argv=full_argv)
    fv(full_argv)
    config = fv.config
    for path in unset:
      leaf = path.split(".")[-1]
      if leaf not in config.eval:
        raise KeyError(f"unknown config key {path}")
      config.eval[leaf] = None
  except flags.Error as e:
    _die(_one_line(e))
  except (KeyError, AttributeError) as e:
    _die(f"unknown config key in an override: {_one_line(e)}")
  return config, workdir


def cmd_eval(argv):
  config, workdir = parse_eval_flags(argv)
  from hybrid_jax.configs import ConfigError
  from hybrid_jax.eval.checkpoints import EvalInputError
  from hybrid_jax.eval.evaluate import evaluate_run
  from hybrid_jax.train.rundir import RunDirError
  try:
    evaluate_run(workdir, config)
  except (ConfigError, EvalInputError, RunDirError, ImportError) as e:
    _die(_one_line(e))


def cmd_plot(argv):
  kinds = {"emergence": "hybrid_jax.plot.emergence", "scaling": "hybrid_jax.plot.scaling"}
  if not argv or argv[0] not in kinds:
    _die(f"plot needs a kind: {', '.join(kinds)} (e.g. hybrid-jax plot emergence RUN...)")
  import importlib
  importlib.import_module(kinds[argv[0]]).main(argv[1:])


def cmd_data(argv):
  try:
    from hybrid_jax.data import cli as data_cli
  except ImportError as e:
    _die(f"hybrid-jax data is not available ({_one_line(e)})")
  data_cli.main(argv)


def cmd_bench(argv):
  """``bench [flags]``: kernels and training; ``bench data``, ``bench eval``, ``bench mesh``."""
  import importlib
  subs = {"data": "hybrid_jax.data.bench", "eval": "hybrid_jax.eval.bench",
          "mesh": "hybrid_jax.mesh_bench"}
  if argv and argv[0] in subs:
    try:
      module = importlib.import_module(subs[argv[0]])
    except ImportError as e:
      _die(f"hybrid-jax bench {argv[0]} is not available ({_one_line(e)})")
    module.main(argv[1:])
    return
  from hybrid_jax import bench
  bench.main(argv)


def cmd_sweep(argv):
  from hybrid_jax.launch.cli import main as sweep_main
  raise SystemExit(sweep_main(argv))


def cmd_fit_scaling(argv):
  from hybrid_jax.analysis.scaling import main as fit_main
  raise SystemExit(fit_main(argv))


COMMANDS = {"train": (cmd_train, "train (or resume) one run"),
            "sweep": (cmd_sweep, "submit a grid of runs, show its status, collect its metrics"),
            "eval": (cmd_eval, "evaluate every checkpoint of a run not yet evaluated"),
            "plot": (cmd_plot, "figures from run directories (plot emergence|scaling DIR...)"),
            "fit-scaling": (cmd_fit_scaling, "fit L(N, D) scaling laws to a collected table"),
            "data": (cmd_data, "prepare and inspect the data"),
            "plan": (lambda argv: sys.exit(__import__("hybrid_jax.plan.cli", fromlist=["main_plan"])
                                           .main_plan(argv)),
                     "compile a run's train step for a TPU topology: memory, FLOPs, time, cost"),
            "bench": (cmd_bench, "print kernel, training (bench data, bench eval) speed figures"),
            "analyze": (lambda argv: __import__("hybrid_jax.analysis.mechanism.cli", fromlist=["main"])
                        .main(argv), "mechanism analyses of a checkpoint "
                        "(analyze heads|trace|constrain|ablate|probe|gradient RUN)")}


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
