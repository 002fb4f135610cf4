"""``hybrid-jax bench eval``: the time to evaluate one checkpoint of the toy default.

Evaluation time does not depend on the weights, so the model is the toy default (or the
config of ``--config FILE [--config.KEY=VALUE ...]``) at its initialisation (nothing is read
or written). Prints the first evaluation (data building and compilation included) and the
steady time per checkpoint (the median of ``--reps`` more), with the tokens scored per
second. Settings are the config's ``eval`` section unless overridden by the flags (and by
the ``--config.eval.*`` overrides, which win over them).
"""

import json
import statistics
import time

from hybrid_jax import overrides
from hybrid_jax.bench import add_config, run_config
from hybrid_jax.bench.timing import wall_times
from hybrid_jax.cli_args import ArgumentParser, usage
from hybrid_jax.eval.evaluate import Evaluator, check_settings
from hybrid_jax.resolve import resolve
from hybrid_jax.train.state import init_params


def _tokens_scored(settings) -> int:
  """Tokens through the model per checkpoint (forward passes, padding rows excluded)."""
  n = settings.short_rows * settings.short_length
  n += len(settings.tasks) * len(settings.depths) * settings.examples * sum(settings.lengths)
  w, length = settings.longppl_window, settings.longppl_length
  segments = (length - w) // (w // 2) + 1
  return n + settings.longppl_rows * (length + segments * w)


PROG = "hybrid-jax bench eval"


def _parser():
  p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                     usage=usage(PROG, "[--config FILE]", overrides.USAGE, "[--tasks TASKS]",
                                 "[--lengths LENGTHS]", "[--depths DEPTHS]", "[--examples N]",
                                 "[--short-rows N]", "[--longppl-length N]",
                                 "[--longppl-window N]", "[--longppl-rows N]", "[--reps N]"),
                     epilog="Each setting left out is the config's eval.* value.")
  add_config(p)
  p.add_argument("--tasks", default=None,
                 help="comma-separated task names, 'all' or '' (default: eval.tasks)")
  p.add_argument("--lengths", default=None,
                 help="comma-separated context lengths (default: eval.lengths)")
  p.add_argument("--depths", default=None,
                 help="comma-separated needle depths (default: eval.depths)")
  p.add_argument("--examples", type=int, default=None, metavar="N",
                 help="examples per task, length and depth (default: eval.examples)")
  p.add_argument("--short-rows", type=int, default=None, metavar="N",
                 help="held-out rows of the short loss (default: eval.short_rows)")
  p.add_argument("--longppl-length", type=int, default=None, metavar="N",
                 help="LongPPL row length (default: eval.longppl_length)")
  p.add_argument("--longppl-window", type=int, default=None, metavar="N",
                 help="LongPPL's short-context window (default: eval.longppl_window)")
  p.add_argument("--longppl-rows", type=int, default=None, metavar="N",
                 help="LongPPL rows, 0 for none (default: eval.longppl_rows)")
  p.add_argument("--reps", type=int, default=2, metavar="N",
                 help="evaluations after the first; their median is the time per checkpoint")
  return p


def parse(argv):
  """(the options, the config to evaluate: unresolved); a mistake is one BenchError line."""
  args, rest = _parser().parse_known_args(argv)

  def flags(cfg):
    e = cfg.eval
    if args.tasks is not None:
      e.tasks = args.tasks
    if args.lengths is not None:
      e.lengths = tuple(int(x) for x in args.lengths.split(","))
    if args.depths is not None:
      e.depths = tuple(float(x) for x in args.depths.split(","))
    for flag in ("examples", "short_rows", "longppl_length", "longppl_window", "longppl_rows"):
      if getattr(args, flag) is not None:
        e[flag] = getattr(args, flag)
  return args, run_config(args.config, rest, setup=flags)


def main(argv=None) -> dict:
  args, cfg = parse(argv)
  settings = check_settings(cfg)
  cfg = resolve(cfg)
  graphdef, rest, params = init_params(cfg)     # no optimizer moments: eval reads params only

  t0 = time.perf_counter()
  evaluator = Evaluator(cfg, graphdef, rest)
  evaluator(params)
  first = time.perf_counter() - t0
  times = wall_times(lambda: evaluator(params), args.reps, warmup=0)
  steady = statistics.median(times) if times else float("nan")
  tokens = _tokens_scored(settings)
  summary = dict(model=f"{cfg.model.size} {cfg.model.pattern} w={cfg.model.window}",
                 settings=settings.to_dict(), first_eval_s=round(first, 3),
                 eval_s_per_checkpoint=round(steady, 3), tokens_per_checkpoint=tokens,
                 tokens_per_s=round(tokens / steady) if times else None)
  print(f"bench eval ({summary['model']}): first {first:.2f} s (data + compile), then "
        f"{steady:.2f} s per checkpoint, {tokens} tokens, {summary['tokens_per_s']} tokens/s")
  print(json.dumps(summary))
  return summary
