"""``hybrid-jax bench data --config FILE [--config.k=v ...]``: a run's input time per step,
text path against token ids in-process and in grain workers, measured in one run (see
``hybrid_jax.bench.data``'s docstring). ``--train`` trains the toy default on the config's
corpus with 0 and 2 workers in turn."""

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hybrid_jax import overrides
from hybrid_jax.bench import BenchError
from hybrid_jax.cli_args import ArgumentParser, usage

TARGET_MS = 33.0
CONFIG_USAGE = usage("hybrid-jax bench data", "--config FILE", overrides.USAGE,
                     "[--workers N]", "[--steps N]", "[--text-steps N]", "[--target-ms MS]",
                     "[--train]", "[--train-steps N]", "[--rounds N]", "[--json FILE]")


def _parser():
  p = ArgumentParser(prog="hybrid-jax bench data", description=__doc__.split("\n\n")[0],
                              usage=CONFIG_USAGE, epilog="--config.KEY=VALUE overrides the config (keys: "
                              "hybrid_jax/configs/base.py; e.g. --config.data.corpus=DIR).")
  p.add_argument("--config", required=True, metavar="FILE",
                 help="config file defining get_config()")
  p.add_argument("--workers", type=int, default=2, metavar="N",
                 help="the larger worker count to time")
  p.add_argument("--steps", type=int, default=40, metavar="N",
                 help="steps timed per id path (after a warm-up; many more than the workers "
                 "buffer, so their rate is what is timed)")
  p.add_argument("--text-steps", type=int, default=3, metavar="N",
                 help="steps timed on the (slow) text path")
  p.add_argument("--target-ms", type=float, default=TARGET_MS, metavar="MS",
                 help="one worker's target")
  p.add_argument("--train", action="store_true",
                 help="train the toy default on the config's corpus with workers 0 and 2 instead")
  p.add_argument("--train-steps", type=int, default=120, metavar="N", help="--train: steps per run")
  p.add_argument("--rounds", type=int, default=2, metavar="N",
                 help="--train: runs per worker count, alternated")
  p.add_argument("--json", default=None, metavar="FILE",
                 help="also write the rows to this file (default: none)")
  return p


def _config(args, rest):
  from hybrid_jax.errors import UserError
  from hybrid_jax.resolve import resolve
  try:
    config = overrides.config_from(args.config, rest)
    return config, resolve(config)
  except UserError as e:
    raise BenchError(str(e)) from None


def _per_step(make, steps: int) -> float:
  """Median seconds of ``make(step)`` over ``steps`` fresh steps, after one warm-up."""
  make(0)
  times = []
  for s in range(1, steps + 1):
    t0 = time.perf_counter()
    make(s)
    times.append(time.perf_counter() - t0)
  return statistics.median(times)


def _workers_per_step(cfg, workers: int, steps: int) -> float:
  """Seconds per step at which ``workers`` grain processes deliver batches: the interval
  over ``steps`` batches after each worker's first (the workers start one after the other,
  in a second or two each, and the steps go to them in turn)."""
  from hybrid_jax.data.pipeline import Batches
  with Batches(cfg, 0, steps + workers, range(cfg.train.batch_size), workers, prefetch=2) as it:
    for _ in range(workers):
      next(it)
    t0 = time.perf_counter()
    for _ in range(steps):
      next(it)
    return (time.perf_counter() - t0) / steps


def input_rows(config, args) -> list[dict]:
  from hybrid_jax.bench.text_mix import TextMix
  from hybrid_jax.data import make_source
  from hybrid_jax.resolve import resolve
  rows = []
  pairs = [config.data.n_pairs] + ([0] if config.data.n_pairs else [])
  for n_pairs in pairs:
    config.data.n_pairs = n_pairs
    cfg = resolve(config)
    text = TextMix(cfg.data, batch_size=cfg.train.batch_size)
    ids = make_source(cfg)
    base = _per_step(text.batch, args.text_steps)
    figures = [("text, in-process", base), ("ids, in-process", _per_step(ids.batch, args.steps))]
    for w in sorted({1, args.workers}):
      figures.append((f"ids, {w} worker{'s' * (w > 1)}", _workers_per_step(cfg, w, args.steps)))
    for path, sec in figures:
      row = dict(path=path, n_pairs=n_pairs, batch=cfg.train.batch_size, seq_len=cfg.data.seq_len,
                 tokenizer=cfg.data.tokenizer, corpus=cfg.data.corpus, ms_per_step=round(sec * 1e3, 2),
                 speedup_over_text=round(base / sec, 1))
      if path == "ids, 1 worker":
        row["target_ms"], row["meets_target"] = args.target_ms, sec * 1e3 <= args.target_ms
      rows.append(row)
      print(json.dumps(row), flush=True)
  return rows


def train_rows(config, args) -> list[dict]:
  """The toy default on the config's corpus and tokenizer, data.workers 0 and 2 alternated."""
  from hybrid_jax.configs.default import get_config
  from hybrid_jax.resolve import resolve
  from hybrid_jax.run import RunDir
  from hybrid_jax.standard_run import train
  rows, losses = [], {}
  with tempfile.TemporaryDirectory() as tmp:
    for r in range(args.rounds):
      for workers in (0, 2):
        c = get_config()
        c.data.name, c.data.corpus, c.data.tokenizer = "mix", config.data.corpus, config.data.tokenizer
        c.model.vocab_size = None
        c.data.workers = workers
        c.train.tokens, c.train.steps = None, args.train_steps
        workdir = Path(tmp) / f"w{workers}_r{r}"
        train(resolve(c), workdir, progress=False)
        records = RunDir(workdir).read_metrics()
        losses.setdefault(workers, [x["loss"] for x in records])
        settled = [x["tokens_per_s"] for x in records[1:]]
        row = dict(round=r, workers=workers, steps=args.train_steps,
                   tokens_per_s=round(statistics.median(settled)),
                   input_wait=round(statistics.median(x["input_wait"] for x in records[1:]), 4),
                   losses_equal_workers_0=[x["loss"] for x in records] == losses[0])
        rows.append(row)
        print(json.dumps(row), flush=True)
  by = {w: statistics.median(x["tokens_per_s"] for x in rows if x["workers"] == w) for w in (0, 2)}
  summary = dict(path="summary", tokens_per_s_ratio_2_over_0=round(by[2] / by[0], 3),
                 losses_bit_identical=all(x["losses_equal_workers_0"] for x in rows))
  rows.append(summary)
  print(json.dumps(summary), flush=True)
  return rows


def main(argv) -> list[dict]:
  args, rest = _parser().parse_known_args(argv)
  config, _ = _config(args, rest)
  if not config.data.corpus:
    raise BenchError("--config: give a corpus (--config.data.corpus=DIR): the text path and the "
                     "token ids differ only on a corpus")
  if args.workers < 1:
    raise BenchError(f"--workers: must be >= 1 (got {args.workers})")
  rows = train_rows(config, args) if args.train else input_rows(config, args)
  if not args.train:
    one = [r for r in rows if r["path"] == "ids, 1 worker"]
    text = [r for r in rows if r["path"] == "text, in-process"]
    mine = ", ".join(f"{r['ms_per_step']:.1f} ms (n_pairs {r['n_pairs']})" for r in one)
    theirs = ", ".join(f"{r['ms_per_step']:.0f} ms" for r in text)
    met = "met" if all(r["meets_target"] for r in one) else "NOT met"
    print(f"bench data: one worker {mine} against the text path's {theirs}; "
          f"target <= {args.target_ms:g} ms: {met}")
  if args.json:
    Path(args.json).write_text("".join(json.dumps(r) + "\n" for r in rows))
  return rows
