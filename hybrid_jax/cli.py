"""The hybrid-jax command trains, evaluates, sweeps, plots and analyses hybrid language models.

Each command is a module of ``hybrid_jax.commands`` with ``main(argv) -> int``;
``hybrid-jax COMMAND --help`` shows its options and their defaults. ``train`` takes
``--config FILE`` (default: the toy CPU config) and overrides such as
``--config.model.window=64`` (``hybrid_jax.overrides``, the one parser of every command
taking them); ``eval`` takes the run's own config with ``--config.eval.*`` overrides. A
failure the user caused (a :class:`~hybrid_jax.errors.UserError`) is printed here, once, as
one line, exit 2.
"""

import importlib
import sys

from hybrid_jax.cli_args import ArgumentParser
from hybrid_jax.errors import UserError, one_line
from hybrid_jax.platforms import keep_jax_on_cpu
from hybrid_jax.xla_cache import use_persistent_compilation_cache

USER_ERROR_EXIT_CODE = 2

# command: (module exposing main(argv) -> int, one-sentence description)
COMMANDS = {
    "train": ("hybrid_jax.commands.train", "Train one run, or resume it from its last checkpoint."),
    "eval": ("hybrid_jax.commands.eval", "Evaluate every checkpoint of a run not yet evaluated."),
    "sweep": ("hybrid_jax.commands.sweep", "Submit a grid of runs, plan its cost, show its status, or collect its metrics."),
    "plot": ("hybrid_jax.commands.plot", "Draw emergence or scaling figures from run directories."),
    "fit-scaling": ("hybrid_jax.commands.fit_scaling", "Fit L(N, D) scaling laws to a collected table."),
    "data": ("hybrid_jax.commands.data", "Build a corpus, train a tokenizer, or show examples."),
    "bench": ("hybrid_jax.commands.bench", "Print speed figures (bench train|mesh|data|eval|kernels|mixers)."),
    "analyze": ("hybrid_jax.commands.analyze", "Run a mechanism analysis of one checkpoint."),
    "plan": ("hybrid_jax.commands.plan", "Compile a run's train step for a TPU topology: memory, FLOPs, time, cost."),
    "export": ("hybrid_jax.commands.export", "Write a checkpoint as a Hugging Face directory (export hf)."),
}


def _parser() -> ArgumentParser:
  p = ArgumentParser(prog="hybrid-jax", description=__doc__.split("\n\n")[0],
                     epilog="commands:\n" + "\n".join(f"  {k:12s} {v[1]}" for k, v in COMMANDS.items()))
  p.add_argument("command", choices=list(COMMANDS), help="The command to run.")
  return p


# (command, subcommand): (module, its function) run in place of the command's ``main``: a
# subcommand that lives with another command (``sweep plan`` compiles runs, as ``plan`` does).
SUBCOMMANDS = {("sweep", "plan"): ("hybrid_jax.commands.plan", "main_sweep_plan")}


def _entry(command: str, argv: list[str]):
  """(the function that runs ``command``, the arguments it gets)."""
  name, function, rest = COMMANDS[command][0], "main", argv
  if argv and (command, argv[0]) in SUBCOMMANDS:
    (name, function), rest = SUBCOMMANDS[command, argv[0]], argv[1:]
  try:
    return getattr(importlib.import_module(name), function), rest
  except ImportError as e:
    raise UserError(f"hybrid-jax {command} is not available ({one_line(e)})") from e


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else list(argv)
  use_persistent_compilation_cache()
  parser = _parser()
  if not argv or argv[0] in ("-h", "--help"):
    parser.print_help()
    return 0 if argv else USER_ERROR_EXIT_CODE
  command = argv[0]
  if command in COMMANDS and not {"-h", "--help"} & set(argv):
    keep_jax_on_cpu(command)               # before any command imports JAX
  try:
    parser.parse_args(argv[:1])
    entry, rest = _entry(command, argv[1:])
    code = entry(rest)
  except SystemExit as e:
    if e.code not in (0, None):         # argparse exits 0 after --help: returned, as by the rest
      raise
    return 0
  except UserError as e:
    print(f"hybrid-jax: error: {e}", file=sys.stderr)
    return USER_ERROR_EXIT_CODE
  return code if isinstance(code, int) else 0


if __name__ == "__main__":
  sys.exit(main())
