"""Answer accuracy of a run's checkpoint by query-to-evidence distance, on held-out rows of
the run's own synthetic training source: does retrieval reach far, or only nearby pairs?

    python -m experiments.calibration.by_distance RUN [--step S] [--rows 64] [--save]

Rows come from a step index no run trains on (10**6), so they are held out. Only the
``synthetic`` source is supported (single-token keys, so the evidence is found exactly).
``--save`` also writes ``RUN/analysis/by_distance-step<S>.json`` (what
``python -m experiments.calibration.run`` exports into the committed store and makes the
calibration tables from).
"""

import argparse
import json
import sys
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from hybrid_jax.data.synthetic import KV_MARK, SyntheticRetrieval
from hybrid_jax.eval.checkpoints import EvalInputError, RunModels
from hybrid_jax.run import atomic_write_text

HELD_OUT_STEP = 10 ** 6
BINS = ((1, 8), (8, 16), (16, 32), (32, 64), (64, 128), (128, 256), (256, 10 ** 9))


def accuracy_by_distance(run: str, step: int | None = None, rows: int = 64) -> dict:
  models = RunModels(run)
  cfg = models.cfg
  if cfg.data.name != "synthetic":
    raise EvalInputError(f"{run}: data.name is {cfg.data.name!r}; only 'synthetic' is supported")
  step = models.steps[-1] if step is None else step
  model = nnx.merge(models.graphdef, models.params(step), models.rest)
  batch = SyntheticRetrieval(cfg.data, batch_size=rows).batch(HELD_OUT_STEP)
  pred = np.asarray(jax.jit(lambda m, x: m(x).argmax(-1))(model, batch["inputs"]))
  distances, correct = [], []
  for r in range(rows):
    tokens = batch["inputs"][r]
    for p in np.flatnonzero(batch["answer_mask"][r]):   # input p is the queried key
      evidence = [i for i in range(p - 1) if tokens[i] == KV_MARK and tokens[i + 1] == tokens[p]]
      if evidence:
        distances.append(p - 1 - evidence[-1])
        correct.append(pred[r, p] == batch["targets"][r, p])
  distances, correct = np.array(distances), np.array(correct)
  out = dict(run=run, step=step, pattern=cfg.model.pattern, window=cfg.model.window,
             accuracy=float(correct.mean()), bins={})
  for lo, hi in BINS:
    m = (distances >= lo) & (distances < hi)
    if m.any():
      out["bins"][f"[{lo},{hi})"] = dict(n=int(m.sum()), accuracy=float(correct[m].mean()))
  return out


def saved_path(run, step: int) -> Path:
  return Path(run) / "analysis" / f"by_distance-step{step}.json"


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("run")
  p.add_argument("--step", type=int, default=None)
  p.add_argument("--rows", type=int, default=64)
  p.add_argument("--save", action="store_true", help="write RUN/analysis/by_distance-step<S>.json")
  args = p.parse_args(argv)
  try:
    out = accuracy_by_distance(args.run, args.step, args.rows)
  except EvalInputError as e:
    sys.exit(f"by_distance: error: {e}")
  print(f"{out['run']} step {out['step']} ({out['pattern']}, w={out['window']}): "
        f"accuracy {out['accuracy']:.3f}")
  for name, b in out["bins"].items():
    print(f"  distance {name:12s} n={b['n']:4d}  accuracy {b['accuracy']:.3f}")
  if args.save:
    path = saved_path(args.run, out["step"])
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(dict(out, run=Path(args.run).name, rows=args.rows)) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
  main()
