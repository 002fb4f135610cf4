"""Peak memory of the retrieval-head analysis at long context, on an untrained model of a
given size (no run directory needed): one process per measurement, since the peak RSS of a
process only grows.

  python -m hybrid_jax.analysis.mechanism.memory --length 32768 [--size toy-xs] [--pattern SF]

prints the peak resident memory after scoring one NIAH example (attention rows of every
layer, entropies) and, with ``--gradient``, after one gradient-influence pass.
"""

import resource
import sys
import time

from hybrid_jax.analysis.mechanism import gradient, heads
from hybrid_jax.cli_args import ArgumentParser, run_tool
from hybrid_jax.configs.base import base_config
from hybrid_jax.data import tasks
from hybrid_jax.model.lm import build_model
from hybrid_jax.resolve import resolve


def peak_rss_mib() -> float:
  return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024     # Linux: KiB


def main(argv=None):
  p = ArgumentParser(prog="python -m hybrid_jax.analysis.mechanism.memory",
                     description=__doc__.splitlines()[0])
  p.add_argument("--length", type=int, required=True, help="the example's tokens")
  p.add_argument("--size", default="toy-xs", help="model size (configs/sizes.py)")
  p.add_argument("--pattern", default="SF", help="layer pattern")
  p.add_argument("--window", type=int, default=32, help="SWA window")
  p.add_argument("--task", default="niah_single_filler", help="hybrid_jax.data.tasks name")
  p.add_argument("--gradient", action="store_true", help="also one gradient-influence pass")
  args = p.parse_args(argv)
  c = base_config()
  c.model.size, c.model.pattern, c.model.window = args.size, args.pattern, args.window
  c.data.seq_len = 256
  c.train.batch_size, c.train.steps = 8, 10
  cfg = resolve(c)
  model = build_model(cfg.model, 0)
  ex = tasks.make_example(args.task, length=args.length, depth=0.5, seed=0, index=0)
  base = peak_rss_mib()
  t0 = time.perf_counter()
  scores = heads.head_scores(model, [ex], batch=1)
  print(f"{args.size} {args.pattern} w={args.window} T={args.length}: head scores "
        f"{time.perf_counter() - t0:.1f}s, peak RSS {peak_rss_mib():.0f} MiB "
        f"(before: {base:.0f} MiB); top head {heads.top_heads(scores, 1)}")
  if args.gradient:
    t0 = time.perf_counter()
    gradient.influence(model, ex.tokens[None], n_targets=20, batch=1)
    print(f"  + gradient influence {time.perf_counter() - t0:.1f}s, peak RSS {peak_rss_mib():.0f} MiB")
  return 0


if __name__ == "__main__":
  sys.exit(run_tool(main))
