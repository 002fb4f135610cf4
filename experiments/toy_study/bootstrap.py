"""Bootstrap 95% intervals over seeds and, where a value is an accuracy on a known number of
examples, over examples too (numpy only).

Resampling n examples of which a share p were right, with replacement, gives a share
distributed as Binomial(n, p) / n: so an accuracy cell of ``eval.jsonl`` (a mean over
``eval.examples`` examples) is resampled over its examples exactly, from the cell alone.
A metric that pools several cells (e.g. two depths of 32 examples) is resampled as one pool
of their examples.

Every interval draws from a fresh generator seeded with ``SEED``, so an interval depends only
on its own inputs, never on what was computed before it: reports stay byte-stable.
"""

import dataclasses
import math

import numpy as np

SEED = 0
DRAWS = 2000
LEVEL = 0.95


def rng() -> np.random.Generator:
  return np.random.default_rng(SEED)


def seed_index(n_seeds: int, gen: np.random.Generator, draws: int = DRAWS) -> np.ndarray:
  """[draws, n_seeds] seed indices drawn with replacement (one row per bootstrap draw)."""
  return gen.integers(0, n_seeds, size=(draws, n_seeds))


def resample(values_S, idx_BxS, gen, n_examples: int | None = None) -> np.ndarray:
  """Per-seed values (any trailing axes, e.g. checkpoints) picked by ``idx_BxS``; accuracies
  on ``n_examples`` examples are then resampled over their examples."""
  v = np.asarray(values_S, float)[idx_BxS]
  if n_examples:
    v = gen.binomial(int(n_examples), np.clip(v, 0.0, 1.0)) / n_examples
  return v


@dataclasses.dataclass(frozen=True)
class Interval:
  point: float
  lo: float
  hi: float
  n_seeds: int

  def fmt(self, f=lambda x: f"{x:.3g}") -> str:
    if self.n_seeds == 0 or math.isnan(self.point):
      return "-"
    return f"{f(self.point)} [{f(self.lo)}, {f(self.hi)}]"

  def __str__(self):
    return self.fmt()


def interval(point: float, boot_B, n_seeds: int) -> Interval:
  """The percentile interval of the bootstrap draws (no interpolation, so +inf draws, i.e.
  censored values, stay +inf instead of turning into NaN)."""
  boot_B = np.asarray(boot_B, float)
  if boot_B.size == 0 or np.isnan(boot_B).all():
    return Interval(float(point), math.nan, math.nan, n_seeds)
  a = (1 - LEVEL) / 2
  lo, hi = np.quantile(boot_B[~np.isnan(boot_B)], [a, 1 - a], method="inverted_cdf")
  return Interval(float(point), float(lo), float(hi), n_seeds)


def mean(values_S, n_examples: int | None = None) -> Interval:
  """The mean over seeds, with its interval over seeds (and examples)."""
  v = np.asarray([x for x in values_S if x is not None], float)
  if v.size == 0:
    return Interval(math.nan, math.nan, math.nan, 0)
  gen = rng()
  boot = resample(v, seed_index(v.size, gen), gen, n_examples).mean(axis=1)
  return interval(float(v.mean()), boot, v.size)


def paired_difference(a_S, b_S, n_examples: int | None = None) -> Interval:
  """mean(a - b) over seeds paired by index (the same seeds drawn for both), each side's
  accuracies resampled over their own examples."""
  a, b = np.asarray(a_S, float), np.asarray(b_S, float)
  gen = rng()
  idx = seed_index(a.size, gen)
  boot = (resample(a, idx, gen, n_examples) - resample(b, idx, gen, n_examples)).mean(axis=1)
  return interval(float((a - b).mean()), boot, a.size)


def first_crossing_K(tokens_K, values_xK, threshold: float) -> np.ndarray:
  """Tokens at which each curve (last axis) first reaches ``threshold``; +inf where never
  (censored: "more than the budget", not dropped)."""
  v = np.asarray(values_xK, float)
  hit = v >= threshold
  first = np.argmax(hit, axis=-1)
  return np.where(hit.any(axis=-1), np.asarray(tokens_K, float)[first], np.inf)


def median_crossing(tokens_K, values_SxK, threshold: float,
                    n_examples: int | None = None) -> Interval:
  """The median over seeds of the tokens to ``threshold`` (censored seeds count as +inf),
  resampling seeds and every checkpoint's examples."""
  v = np.asarray(values_SxK, float)
  point = float(np.median(first_crossing_K(tokens_K, v, threshold)))
  gen = rng()
  boot = resample(v, seed_index(v.shape[0], gen), gen, n_examples)       # [B, S, K]
  boot_B = np.median(first_crossing_K(tokens_K, boot, threshold), axis=1)
  return interval(point, boot_B, v.shape[0])


def ratio_of_medians(tokens_K, a_SxK, b_SxK, threshold: float,
                     n_examples: int | None = None) -> Interval:
  """median tokens-to-threshold of ``a`` / that of ``b`` (independent groups), censored
  seeds at +inf: inf/finite = inf (``a`` never got there, ``b`` did); when both medians are
  censored nothing is measured and the draw counts as 1 (no difference shown)."""
  def medians(v, gen):
    boot = resample(np.asarray(v, float), seed_index(len(v), gen), gen, n_examples)
    return np.median(first_crossing_K(tokens_K, boot, threshold), axis=1)

  point = _ratio(np.median(first_crossing_K(tokens_K, a_SxK, threshold)),
                np.median(first_crossing_K(tokens_K, b_SxK, threshold)))
  gen = rng()
  return interval(float(point), _ratio(medians(a_SxK, gen), medians(b_SxK, gen)),
                  min(len(a_SxK), len(b_SxK)))


def median(values_S) -> Interval:
  """The median over seeds of per-seed values (+inf: censored), resampling seeds."""
  v = np.asarray(values_S, float)
  gen = rng()
  return interval(float(np.median(v)), np.median(v[seed_index(v.size, gen)], axis=1), v.size)


def ratio_of_median_values(a_S, b_S) -> Interval:
  """median(a) / median(b) of per-seed values, censored at +inf (both censored: 1)."""
  a, b = np.asarray(a_S, float), np.asarray(b_S, float)
  gen = rng()
  boot = _ratio(np.median(a[seed_index(a.size, gen)], axis=1),
               np.median(b[seed_index(b.size, gen)], axis=1))
  return interval(float(_ratio(np.median(a), np.median(b))), boot, min(a.size, b.size))


def _ratio(x, y):
  """x / y elementwise, with inf / inf (both censored: nothing measured) as 1."""
  x, y = np.asarray(x, float), np.asarray(y, float)
  with np.errstate(invalid="ignore", divide="ignore"):
    r = x / y
  return np.where(np.isinf(x) & np.isinf(y), 1.0, r)


def difference(a_S, b_S, n_examples: int | None = None) -> Interval:
  """mean(a) - mean(b) of two independent groups of seeds, each resampled on its own."""
  a, b = np.asarray(a_S, float), np.asarray(b_S, float)
  gen = rng()
  boot = (resample(a, seed_index(a.size, gen), gen, n_examples).mean(axis=1)
          - resample(b, seed_index(b.size, gen), gen, n_examples).mean(axis=1))
  return interval(float(a.mean() - b.mean()), boot, min(a.size, b.size))


def paired(fn, arrays: dict, n_examples: int | None = None) -> Interval:
  """mean over seeds of ``fn(arrays)`` (per-seed values of several measurements of the same
  runs: the same seeds are drawn for all, each measurement's accuracies resampled over its
  own examples, independently, which can only widen the interval)."""
  arrays = {k: np.asarray(v, float) for k, v in arrays.items()}
  n_seeds = len(next(iter(arrays.values())))
  gen = rng()
  idx = seed_index(n_seeds, gen)
  boot = fn({k: resample(v, idx, gen, n_examples) for k, v in arrays.items()}).mean(axis=1)
  return interval(float(np.mean(fn(arrays))), boot, n_seeds)
