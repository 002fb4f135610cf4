"""``hybrid-jax bench data``: is the data path fast enough never to be the bottleneck?

Without ``--config``: one JSON line per producer (the training mix, each task generator):
examples/s and tokens/s on one CPU thread, and the ratio to the training consumption
(tokens/s of a few train steps of the toy default, or ``--train-tokens-per-s``). Target:
ratio >= 10.

With ``--config FILE [--config.k=v ...]`` (a run's config: the paper base with a corpus and
its tokenizer, say): the input milliseconds per step of that run's batch, made by the text
path it replaced (every row tokenized as it is made: ``bench.text_mix``), by the token-id
path in this process, and by grain workers (1 and ``--workers``), all in this run, with the
speed-ups over the text path; each at the config's ``n_pairs`` and at 0. Target: one worker
<= ``--target-ms`` (33 ms: a third of the grid's fastest roofline step). ``--train``
instead trains the toy default on the config's corpus with ``data.workers`` 0 and 2 in turn
and compares losses (bit-identical) and tokens/s.
"""

import json
import sys
import time

from hybrid_jax.bench.input_pipeline import CONFIG_USAGE
from hybrid_jax.bench.train import project_step_seconds, shape_config
from hybrid_jax.cli_args import ArgumentParser, usage
from hybrid_jax.configs.base import base_config
from hybrid_jax.data import tasks
from hybrid_jax.data.corpus import open_corpus
from hybrid_jax.data.mix import TrainingMix
from hybrid_jax.data.tokenizer import load_tokenizer

TARGET_RATIO = 10.0


def train_tokens_per_s(steps: int = 4) -> float:
  """Median tokens/s of compiled train steps of the toy default config."""
  cfg = shape_config("toy")
  return cfg.train.batch_size * cfg.data.seq_len / project_step_seconds(cfg, steps)


def rate(make, tokens_each: int, seconds: float, min_reps: int = 3) -> tuple[float, float]:
  """(examples/s, tokens/s) of ``make(i)``, called with fresh indices for ``seconds``."""
  make(0)   # warm caches
  n, t0 = 0, time.perf_counter()
  while n < min_reps or time.perf_counter() - t0 < seconds:
    make(n + 1)
    n += 1
  dt = time.perf_counter() - t0
  return n / dt, n * tokens_each / dt


def _parser():
  p = ArgumentParser(
      prog="hybrid-jax bench data", description=__doc__.split("\n\n")[0],
      usage=usage("hybrid-jax bench data", "[--train-tokens-per-s N]", "[--length N]",
                  "[--seq-len N]", "[--batch-size N]", "[--data DIR]", "[--tokenizer TOKENIZER]",
                  "[--seconds S]", "[--tasks NAMES]") + "\n       " + CONFIG_USAGE,
      epilog=__doc__.split("\n\n", 1)[1] + "\nhybrid-jax bench data --config FILE --help shows "
      "the options of that mode.")
  p.add_argument("--train-tokens-per-s", type=float, default=None, metavar="N",
                 help="training consumption to compare with (default: measure the toy default)")
  p.add_argument("--length", type=int, default=2048, metavar="N",
                 help="task example length (tokens)")
  p.add_argument("--seq-len", type=int, default=256, metavar="N", help="training mix row length")
  p.add_argument("--batch-size", type=int, default=8, metavar="N",
                 help="training mix rows per batch")
  p.add_argument("--data", default="", metavar="DIR",
                 help="corpus directory (default: prose from the seed)")
  p.add_argument("--tokenizer", default="byte",
                 help="'byte', a tokenizer.json / sentencepiece model, or a directory holding one")
  p.add_argument("--seconds", type=float, default=1.5, metavar="S", help="time per producer")
  p.add_argument("--tasks", default="all", metavar="NAMES",
                 help="comma-separated task names, or all")
  return p


def main(argv=None):
  argv = sys.argv[1:] if argv is None else list(argv)
  mode = ArgumentParser(prog="hybrid-jax bench data", add_help=False)   # --config: a run's input
  mode.add_argument("--config", default=None)
  if mode.parse_known_args(argv)[0].config is not None:
    from hybrid_jax.bench.input_pipeline import main as config_main
    return config_main(argv)
  args = _parser().parse_args(argv)
  names = tasks.TASK_NAMES if args.tasks == "all" else tuple(args.tasks.split(","))
  try:
    for name in names:
      tasks.make_example(name, length=args.length, depth=0.5, seed=0, index=0)
    tokenizer = load_tokenizer(args.tokenizer)
    d = base_config().data
    d.name, d.seq_len, d.seed, d.corpus = "mix", args.seq_len, 0, args.data
    mix = TrainingMix(d, batch_size=args.batch_size, tokenizer=tokenizer)
    corpus = None
    if args.data:
      corpus = open_corpus(args.data, "validation")
  except ValueError as e:
    print(f"hybrid-jax bench data: error: {' '.join(str(e).split())}", file=sys.stderr)
    raise SystemExit(2)

  consumption = args.train_tokens_per_s or train_tokens_per_s()
  print(json.dumps(dict(producer="train_consumption", tokens_per_s=round(consumption))), flush=True)
  rows = []

  def report(producer, ex_s, tok_s, **extra):
    row = dict(producer=producer, examples_per_s=round(ex_s, 1), tokens_per_s=round(tok_s),
               ratio=round(tok_s / consumption, 1), ok=tok_s >= TARGET_RATIO * consumption, **extra)
    rows.append(row)
    print(json.dumps(row), flush=True)

  tokens = args.batch_size * args.seq_len
  bps, tps = rate(lambda s: mix.batch(s), tokens, args.seconds)
  report("mix", bps * args.batch_size, tps, seq_len=args.seq_len)
  for name in names:
    ex_s, tok_s = rate(lambda i: tasks.make_example(name, length=args.length, depth=0.5, seed=0, index=i,
                                                    tokenizer=tokenizer, corpus=corpus),
                       args.length, args.seconds)
    report(name, ex_s, tok_s, length=args.length)
  slow = [r["producer"] for r in rows if not r["ok"]]
  print(f"data path: {len(rows) - len(slow)}/{len(rows)} producers >= {TARGET_RATIO:g}x the training "
        f"consumption ({consumption:,.0f} tokens/s)" + (f"; below: {', '.join(slow)}" if slow else ""))
  return rows


if __name__ == "__main__":
  main()
