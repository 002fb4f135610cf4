"""``hybrid-jax bench SUBCOMMAND``: train (the default), mesh, data, eval, kernels, mixers."""

import importlib
import sys

from hybrid_jax.bench import BenchError
from hybrid_jax.cli_args import ArgumentParser

SUBCOMMANDS = {
    "train": ("hybrid_jax.bench.train", "training tokens/s, where the step's time goes, "
              "--peer: ratios to the PyTorch peer"),
    "mesh": ("hybrid_jax.bench.mesh", "step time and bytes per device under several meshes"),
    "loop": ("hybrid_jax.bench.loop", "checkpoint cadence and blocking, loop overhead: ratios to "
             "baselines in the same run"),
    "data": ("hybrid_jax.bench.data", "data throughput against the training consumption"),
    "eval": ("hybrid_jax.bench.eval", "time to evaluate one toy checkpoint"),
    "kernels": ("hybrid_jax.bench.kernels", "each kernel's time, FLOP/s and ratios"),
    "mixers": ("hybrid_jax.bench.mixers", "attention and recurrent-scan cost against T"),
}


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else list(argv)
  if argv[:1] in (["-h"], ["--help"]):
    p = ArgumentParser(prog="hybrid-jax bench", description=__doc__.splitlines()[0])
    p.add_argument("subcommand", choices=list(SUBCOMMANDS),
                   help="; ".join(f"{k}: {v[1]}" for k, v in SUBCOMMANDS.items()))
    p.print_help()
    return 0
  name, rest = (argv[0], argv[1:]) if argv[:1] and argv[0] in SUBCOMMANDS else ("train", argv)
  module = importlib.import_module(SUBCOMMANDS[name][0])
  try:
    module.main(rest)
  except BenchError as e:
    print(f"hybrid-jax bench {name}: error: {e}", file=sys.stderr)
    return 2
  return 0


if __name__ == "__main__":
  sys.exit(main())
