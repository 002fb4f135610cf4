"""Axes that always carry tick labels, and seed groups drawn as a mean with a band."""

import json
import math
from pathlib import Path

import numpy as np
from matplotlib.ticker import LogFormatterSciNotation, LogLocator, NullFormatter

from hybrid_jax.run import read_config_json


def readable_scale(ax, which: str, values):
  """Log scale when the positive ``values`` span at least a decade, linear otherwise: a log
  axis inside one decade holds no major tick, so it would show no label at all. A log axis
  holding fewer than two powers of ten (2e4 to 6e5 tokens: 1e5 alone) is ticked and labelled
  at 1, 2 and 5 times each: one label gives no scale to read."""
  pos = [v for v in values if v is not None and math.isfinite(v) and v > 0]
  if pos and max(pos) >= 10 * min(pos):
    getattr(ax, f"set_{which}scale")("log")
    axis = getattr(ax, f"{which}axis")
    axis.set_minor_formatter(NullFormatter())   # minor labels overlap
    if math.floor(math.log10(max(pos))) - math.ceil(math.log10(min(pos))) < 1:
      axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
      axis.set_major_formatter(LogFormatterSciNotation(   # every major tick, not bases only
          labelOnlyBase=False, minor_thresholds=(math.inf, math.inf)))
  else:
    getattr(ax, f"set_{which}scale")("linear")


SEEDS = (("train", "seed"), ("data", "seed"))   # a run's training seeds: init, data stream


def seedless_key(run: Path) -> str:
  """The run's config without its training seeds: runs sharing it differ only by seed. Both
  seeds go: config.json holds the resolved config, where an unset ``data.seed`` has become
  ``train.seed``, so a seed sweep differs in both (dropping ``train.seed`` alone kept every
  seed apart); a data seed set on purpose is a seed as much (``eval.seed``, which picks the
  examples every run is scored on, stays)."""
  cfg = read_config_json(run)
  if cfg is None:
    return str(run)
  cfg.pop("derived", None)
  for section, key in SEEDS:
    if isinstance(cfg.get(section), dict):
      cfg[section] = {k: v for k, v in cfg[section].items() if k != key}
  return json.dumps(cfg, sort_keys=True)


def mean_band(curves: list[list[tuple[float, float]]]):
  """(x, mean, low, high) over the x values every curve has: the seeds' mean and range."""
  common = sorted(set.intersection(*(set(x for x, _ in c) for c in curves)))
  ys = np.array([[dict(c)[x] for x in common] for c in curves], dtype=float)
  return common, ys.mean(0), ys.min(0), ys.max(0)
