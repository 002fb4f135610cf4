"""``hybrid-jax train``: train one run, or resume it from its last checkpoint, with the
standard hooks (``hybrid_jax.standard_run``: evaluation during training and the training
curves at the end).

Options are the project parser's; ``--config FILE`` (default: the toy CPU config) and the
``--config.KEY=VALUE`` overrides (``hybrid_jax.overrides``: ``--config.a.b=None`` unsets an
optional key) make the config.
"""

import os
import sys

from hybrid_jax import overrides
from hybrid_jax.cli_args import ArgumentParser, usage
from hybrid_jax.errors import UserError
from hybrid_jax.standard_run import train

# resolve, the loop and the local processes import JAX (seconds): main imports them, so that
# help and flag errors stay instant.

PROG = "hybrid-jax train"
DESCRIPTION = "Train one run, or resume it from its last checkpoint."


LOCAL_PROCESSES_HELP = ("CPU: run as N single-threaded processes, one per core, data parallel "
                        "(faster than one process on every core at d_model >= 256)")


class _Parser(ArgumentParser):
  """The train parser, whose ``--help`` ends with every config key of the config file."""

  config_file = None

  def format_help(self):
    return super().format_help() + "\n" + config_keys(self.config_file)


def _parser(config_file=None) -> ArgumentParser:
  p = _Parser(prog=PROG, description=DESCRIPTION,
              usage=usage(PROG, "--workdir DIR", "[--config FILE]", overrides.USAGE,
                          "[--local_processes N]", "[--quiet]", "[--coordinator HOST:PORT]",
                          "[--num_processes N]", "[--process_id I]"))
  p.config_file = config_file
  p.add_argument("--workdir", required=True, metavar="DIR",
                 help="Run directory (created; resumed if it exists).")
  p.add_argument("--config", default=None, metavar="FILE", help="Config file defining "
                 "get_config() (default: the toy CPU config, hybrid_jax/configs/default.py).")
  p.add_argument("--local_processes", type=int, default=1, metavar="N", help=LOCAL_PROCESSES_HELP)
  p.add_argument("--quiet", action="store_true",
                 help="Print no progress bar (it is shown only on a terminal anyway).")
  p.add_argument("--coordinator", default=None, metavar="HOST:PORT",
                 help="Multi-process job: HOST:PORT of process 0 (default: one process).")
  p.add_argument("--num_processes", type=int, default=None, metavar="N",
                 help="Multi-process job: number of processes (default: one process).")
  p.add_argument("--process_id", type=int, default=None, metavar="I",
                 help="Multi-process job: this process's index (default: one process).")
  return p


def _flat(prefix, d):
  for k, v in d.items():
    if isinstance(v, dict):
      yield from _flat(f"{prefix}{k}.", v)
    else:
      yield f"{prefix}{k}", v


def config_keys(config_file) -> str:
  """Every config key with its default value, for ``--help``."""
  lines = ["config keys (override with --config.KEY=VALUE; defaults from the config file):"]
  try:
    lines += [f"  {k} = {v!r}" for k, v in _flat("", overrides.load_config_file(config_file).to_dict())]
  except UserError as e:    # a config file that fails to load still gets the options' help
    lines.append(f"  (the config file cannot be loaded: {e})")
  return "\n".join(lines) + "\n"


def parse(argv: list[str]):
  """(the train options, their ``overrides`` the override arguments; the config with them
  applied); UserError on bad flags."""
  known = ArgumentParser(prog=PROG, add_help=False)     # which file --help lists the keys of
  known.add_argument("--config", default=None)
  args, args.overrides = _parser(known.parse_known_args(argv)[0].config).parse_known_args(argv)
  config = overrides.config_from(args.config, args.overrides)
  if args.local_processes != 1 and args.coordinator is not None:
    raise UserError("--local_processes starts its own processes; it takes no --coordinator")
  if args.coordinator is not None:    # handed to hybrid_jax.train.distributed through its variables
    n, i = args.num_processes, args.process_id
    if n is None or i is None or not 0 <= i < n:
      raise UserError("--coordinator needs --num_processes N and --process_id I with 0 <= I < N")
    from hybrid_jax.train.distributed import ENV   # lazy: JAX
    os.environ.update(dict(zip(ENV, (args.coordinator, str(n), str(i)))))
  return args, config


def parse_train_flags(argv: list[str]):
  """(config, workdir) from ``--config FILE --config.a.b=v --workdir DIR``; UserError on bad flags."""
  args, config = parse(argv)
  return config, args.workdir


def _child_argv(args) -> list[str]:
  """What each of ``--local_processes`` N processes is started with."""
  return (["--workdir", args.workdir] + (["--config", args.config] if args.config else [])
          + (["--quiet"] if args.quiet else []) + args.overrides)


def main(argv) -> int:
  args, config = parse(list(argv))
  from hybrid_jax.resolve import resolve   # lazy: JAX
  from hybrid_jax.train import loop
  config = resolve(config)              # once per train command; a ConfigError (a UserError) before anything is written
  if args.local_processes != 1:
    from hybrid_jax.train import local_processes
    local_processes.check(args.local_processes, config)
    return local_processes.run(_child_argv(args), args.local_processes)
  try:
    status = train(config, args.workdir, progress=False if args.quiet else None)
  except loop.Preempted as e:
    print(f"hybrid-jax: {e}", file=sys.stderr)
    return loop.PREEMPTED_EXIT_CODE
  print(f"hybrid-jax: run {args.workdir}: {status['state']} at step {status['step']}/{status['total_steps']}")
  return 0
