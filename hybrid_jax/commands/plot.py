"""``hybrid-jax plot emergence|scaling``: figures from run directories."""

import importlib

from hybrid_jax.cli_args import ArgumentParser
from hybrid_jax.errors import UserError

KINDS = {"emergence": ("hybrid_jax.plot.emergence", "Draw a long-context metric against training tokens, per run."),
         "scaling": ("hybrid_jax.plot.scaling", "Draw each run's final metrics against its training tokens.")}


def main(argv) -> int:
  p = ArgumentParser(prog="hybrid-jax plot", description="Draw figures from run directories.",
                     epilog="kinds:\n" + "\n".join(f"  {k:10s} {v[1]}" for k, v in KINDS.items())
                     + "\n\nhybrid-jax plot KIND --help shows the options of one kind.")
  p.add_argument("kind", choices=list(KINDS), help="The figure to draw.")
  if argv and argv[0] in ("-h", "--help"):
    p.print_help()
    return 0
  if not argv or argv[0] not in KINDS:
    raise UserError(f"plot needs a kind: {', '.join(KINDS)} (e.g. hybrid-jax plot emergence RUN...), "
                    f"got {argv[0] if argv else 'none'!r}")
  importlib.import_module(KINDS[argv[0]][0]).main(argv[1:])
  return 0
