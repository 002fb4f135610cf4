"""``hybrid-jax bench loop``: what the training loop costs beyond its steps, each figure a
ratio to a baseline measured in the same run.

  cadence    the toy default with a checkpoint every step against one every 1000 steps,
             with async saves (now) and synchronous ones (before): wall time per step
             ratios (target: async <= 1.15x)
  blocking   the S1 model's parameters and AdamW state on this CPU: how long a save blocks
             the loop with async saves, against a synchronous save (target: <= 10%)
  overhead   the toy default's loop (hooks, logging, checkpoints, input) against a bare
             jitted loop over the same step and batches, alternating which runs first
             (target: >= 0.97x tokens/s; the loop's median interval, and its whole span
             with the intervals that held a save)
"""

import contextlib
import io
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

from hybrid_jax import overrides
from hybrid_jax.cli_args import ArgumentParser, usage

PARTS = ("cadence", "blocking", "overhead")


PROG = "hybrid-jax bench loop"


def _parser():
  from hybrid_jax.bench import add_config
  p = ArgumentParser(prog=PROG, description=__doc__.strip(), usage=usage(
      PROG, "[--config FILE]", overrides.USAGE, "[--parts PARTS]", "[--steps N]", "[--rounds N]",
      "[--saves N]", "[--json FILE]"))
  add_config(p, "the toy default, hybrid_jax/configs/default.py; cadence and overhead train "
                "it, blocking saves the S1 model's state whatever the config")
  p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
  p.add_argument("--steps", type=int, default=None,
                 help="training steps per toy run (default: the config's own, 300 for the toy default)")
  p.add_argument("--rounds", type=int, default=2, help="runs per variant, alternated")
  p.add_argument("--saves", type=int, default=3, help="blocking: saves per mode, alternated")
  p.add_argument("--json", default=None, help="also write the rows to this file (default: none)")
  return p


def _toy(args, steps, **checkpoint):
  """The config cadence and overhead train: ``--config`` with its overrides, then the
  bench's own steps and checkpoint variant (last, so an override cannot change what the
  bench compares)."""
  from hybrid_jax.bench import run_config
  c = run_config(args.config, args.overrides)
  if steps is not None:
    c.train.tokens, c.train.tokens_per_param, c.train.steps = None, None, steps
  for k, v in checkpoint.items():
    c.checkpoint[k] = v
  return c


def _interval_seconds(workdir, cfg) -> list[float]:
  """Wall seconds per step of each logged interval after the first (compile)."""
  from hybrid_jax.run import RunDir
  per_step = cfg.train.batch_size * cfg.data.seq_len
  return [per_step / r["tokens_per_s"] for r in RunDir(workdir).read_metrics()[1:]]


def _step_seconds(workdir, cfg) -> float:
  """Median wall seconds per step over the logged intervals after the first (compile)."""
  return statistics.median(_interval_seconds(workdir, cfg))


def cadence(args, tmp) -> list[dict]:
  from hybrid_jax.resolve import resolve
  from hybrid_jax.train import loop
  variants = {"every 1000": dict(every=1000), "every 1, async": dict(every=1, async_save=True),
              "every 1, sync": dict(every=1, async_save=False)}
  seconds = {k: [] for k in variants}
  skipped = {k: [] for k in variants}
  for r in range(args.rounds):
    for name, ck in variants.items():
      cfg = resolve(_toy(args, args.steps, **ck))
      workdir = Path(tmp) / f"{name.replace(' ', '_').replace(',', '')}_{r}"
      said = io.StringIO()
      with contextlib.redirect_stderr(said):     # the loop's count of skipped rolling saves
        loop.train(cfg, workdir, progress=False)
      seconds[name].append(_step_seconds(workdir, cfg))
      skipped[name].append(int(m.group(1)) if (m := re.search(r"(\d+) rolling checkpoint", said.getvalue())) else 0)
  base = statistics.median(seconds["every 1000"])
  return [dict(part="cadence", variant=k, step_ms=round(1e3 * statistics.median(v), 2),
               ratio_to_every_1000=round(statistics.median(v) / base, 3),
               rolling_saves_skipped=statistics.median(skipped[k]),
               **({"target": 1.15, "meets": statistics.median(v) / base <= 1.15}
                  if k == "every 1, async" else {}))
          for k, v in seconds.items()]


def blocking(args, tmp) -> list[dict]:
  import jax
  from hybrid_jax.configs.paper import get_config
  from hybrid_jax.resolve import resolve
  from hybrid_jax.train.checkpoint import Checkpointer
  from hybrid_jax.train.state import init_state
  c = get_config()
  c.model.size, c.train.tokens_per_param = "S1", 100.0
  cfg = resolve(c)
  state = init_state(cfg)[2]
  jax.block_until_ready(state)
  n_bytes = sum(x.nbytes for x in jax.tree.leaves(state))
  out = {True: [], False: []}
  ckpts = {}
  for async_save in (True, False):          # one manager per mode, warmed by a first save
    c.checkpoint.async_save = async_save
    ckpts[async_save] = Checkpointer(Path(tmp) / f"s1_{async_save}", resolve(c).checkpoint, 10 ** 6)
    ckpts[async_save].save(1, state, force=True)
    ckpts[async_save].wait()
  for step in range(2, args.saves + 2):
    for async_save, ckpt in ckpts.items():
      t0 = time.perf_counter()
      ckpt.save(step, state, force=True)
      blocked = time.perf_counter() - t0
      ckpt.wait()
      out[async_save].append((blocked, time.perf_counter() - t0))
  for ckpt in ckpts.values():
    ckpt.close()
  sync = statistics.median(t for _, t in out[False])
  rows = []
  for async_save, times in out.items():
    blocked = statistics.median(b for b, _ in times)
    row = dict(part="blocking", variant="async" if async_save else "sync", state_mb=round(n_bytes / 2 ** 20),
               blocked_s=round(blocked, 3), whole_save_s=round(statistics.median(t for _, t in times), 3),
               blocked_over_sync_save=round(blocked / sync, 3))
    if async_save:
      row.update(target=0.10, meets=blocked / sync <= 0.10)
    rows.append(row)
  return rows


def _loop_tps(workdir, cfg) -> tuple[float, float]:
  """(median, whole-span) tokens/s of a trained run's logged intervals after the first
  (compile): the median leaves out an interval that held a save; the span counts it. The
  intervals are equally long (``train.log_every`` steps), so the span's rate is the mean's."""
  per_step = cfg.train.batch_size * cfg.data.seq_len
  seconds = _interval_seconds(workdir, cfg)
  return per_step / statistics.median(seconds), per_step * len(seconds) / sum(seconds)


def _bare_tps(cfg, steps) -> float:
  """A bare jitted loop over the same step and batches (made and placed beforehand)."""
  import jax
  from hybrid_jax.data import make_source
  from hybrid_jax.train import loop, sharding
  from hybrid_jax.train.state import init_state
  mesh = sharding.make_mesh(cfg.mesh)
  graphdef, rest, state, tx, _ = init_state(cfg, mesh)
  step_fn = loop.run_step(cfg, mesh, graphdef, rest, tx, sharding.state_shardings(mesh, state))
  source = make_source(cfg)
  batches = [loop.step_batch(cfg, mesh, source.batch(s)) for s in range(steps)]
  state, _ = step_fn(state, batches[0])         # compile
  jax.block_until_ready(state)
  t0 = time.perf_counter()
  for b in batches[1:]:
    state, metrics = step_fn(state, b)
  jax.block_until_ready((state, metrics))
  return cfg.train.batch_size * cfg.data.seq_len * (steps - 1) / (time.perf_counter() - t0)


def overhead(args, tmp) -> list[dict]:
  from hybrid_jax.resolve import resolve
  from hybrid_jax.train import loop
  cfg = resolve(_toy(args, args.steps))
  steps = cfg.derived.steps
  loop_tps, loop_span, bare_tps = [], [], []
  for r in range(args.rounds):
    def run_loop(r=r):
      workdir = Path(tmp) / f"overhead_{r}"
      loop.train(cfg, workdir, progress=False)
      median, span = _loop_tps(workdir, cfg)
      loop_tps.append(median)
      loop_span.append(span)
    first, second = (run_loop, lambda: bare_tps.append(_bare_tps(cfg, steps)))
    if r % 2:                                    # alternate which goes first (warm caches, load)
      first, second = second, first
    first()
    second()
  ratio = statistics.median(loop_tps) / statistics.median(bare_tps)
  return [dict(part="overhead", loop_tokens_per_s=round(statistics.median(loop_tps)),
               loop_span_tokens_per_s=round(statistics.median(loop_span)),
               bare_tokens_per_s=round(statistics.median(bare_tps)), ratio=round(ratio, 3),
               ratio_span=round(statistics.median(loop_span) / statistics.median(bare_tps), 3),
               rounds=[round(a / b, 3) for a, b in zip(loop_tps, bare_tps)],
               target=0.97, meets=ratio >= 0.97)]


def main(argv=None) -> list[dict]:
  from hybrid_jax.bench import BenchError, run_config
  args, args.overrides = _parser().parse_known_args(sys.argv[1:] if argv is None else argv)
  run_config(args.config, args.overrides)       # a mistake: one line before anything runs
  parts = args.parts.split(",")
  if unknown := [p for p in parts if p not in PARTS]:
    raise BenchError(f"--parts: unknown {', '.join(unknown)} (known: {', '.join(PARTS)})")
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    for part in parts:
      for row in globals()[part](args, tmp):
        rows.append(row)
        print(json.dumps(row), flush=True)
  if args.json:
    Path(args.json).write_text("".join(json.dumps(r) + "\n" for r in rows))
  return rows
