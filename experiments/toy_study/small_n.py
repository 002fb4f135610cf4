"""Statistics for few seeds per arm (the confirmatory protocol: at least 7 fresh seeds each).

Why not only ``bootstrap``: at 3 to 7 seeds a percentile bootstrap over seeds is roughly
[min, max] (about 75% coverage at 3 seeds, not 95%), and the outcomes are bimodal (a seed
retrieves at ~1.0 or it fails), so a mean over seeds hides what is a count. This module gives
the exact or small-sample tools instead: a count of successful seeds with its exact
(Clopper-Pearson) interval and Fisher's test, exact permutation tests over seeds (every
relabelling enumerated where that is affordable), a t interval and a BCa bootstrap, Holm's
correction over a report's many verdicts, and intervals for a ratio of the slowest to the
fastest arm in which the pick of those arms is part of the statistic: re-picked in every
bootstrap draw (which shows the pick's upward bias but never covers 1), and simultaneous over
every pair (which does, at >= 95% in simulation, where pick-then-bootstrap excludes it ~12%).

numpy and scipy only. Anything random draws from a fresh generator seeded with ``seed``
(default ``SEED``), so a result depends only on its inputs and reports stay byte-stable.
Intervals are plain ``(estimate, lo, hi)`` tuples of floats; ``bootstrap.Interval(*t, n)``
makes one a verdict can be decided on.
"""

import itertools
import math
from typing import Callable, NamedTuple

import numpy as np
from scipy import stats

SEED = 0
LEVEL = 0.95
DRAWS = 10_000            # bootstrap draws (BCa reads tail quantiles: more than a percentile)
EXACT_LIMIT = 200_000     # relabellings enumerated exactly up to this many
MC_DRAWS = 100_000        # Monte Carlo relabellings beyond it
ALTERNATIVES = ("greater", "less", "two-sided")
PICKS = {"max/min of medians": np.median, "max/min of means": np.mean}


# --- counts of successful seeds --------------------------------------------------------------

def clopper_pearson(k: int, n: int, level: float = LEVEL) -> tuple[float, float]:
  """Exact binomial interval for ``k`` successes of ``n``: it covers at least ``level`` for
  every true rate, which no normal approximation does at n = 7 (k = 0 or n included)."""
  k, n = _count(k, n)
  _level(level)
  a = (1 - level) / 2
  lo = 0.0 if k == 0 else float(stats.beta.ppf(a, k, n - k + 1))
  hi = 1.0 if k == n else float(stats.beta.ppf(1 - a, k + 1, n - k))
  return lo, hi


def success_count(values, threshold: float) -> tuple[int, int]:
  """(seeds whose outcome is >= ``threshold``, seeds): a bimodal outcome (retrieves at ~1.0 or
  fails) read as the count it is. A NaN is refused: say whether that seed failed or was not
  run (+inf, a censored time, is a number like any other)."""
  v = np.asarray(values, float).ravel()
  if np.isnan(v).any():
    raise ValueError("success_count: a NaN outcome; count that seed as failed or leave it out")
  return int((v >= threshold).sum()), int(v.size)


def fisher_exact_two_sided(k1: int, n1: int, k2: int, n2: int) -> float:
  """Two-sided exact p-value that two arms' success rates differ (k1 of n1 against k2 of
  n2 seeds): exact at any count, where a chi-squared test needs expected counts >= 5."""
  k1, n1 = _count(k1, n1)
  k2, n2 = _count(k2, n2)
  table = [[k1, n1 - k1], [k2, n2 - k2]]
  return float(stats.fisher_exact(table, alternative="two-sided").pvalue)


# --- permutation tests over seeds ------------------------------------------------------------

class PValue(NamedTuple):
  """A permutation p-value and how it was computed (a report states both)."""
  p: float
  exact: bool           # every relabelling enumerated; else Monte Carlo
  relabellings: int     # how many were evaluated (all of them, or the Monte Carlo draws)

  @property
  def method(self) -> str:
    how = "exact" if self.exact else "Monte Carlo"
    return f"{how}, {self.relabellings:,} relabellings"


def mean_difference(x, y, axis=-1):
  """mean(x) - mean(y) along ``axis``: the default statistic of the two-sample test."""
  return np.mean(x, axis=axis) - np.mean(y, axis=axis)


def exact_permutation_test(a, b, statistic: Callable = mean_difference,
                           alternative: str = "two-sided", limit: int = EXACT_LIMIT,
                           draws: int = MC_DRAWS, seed: int = SEED) -> PValue:
  """p-value of ``statistic(a, b, axis)`` under exchangeable seeds of two independent arms:
  exact at any number of seeds, no normality assumed. Every one of the C(n1 + n2, n1)
  relabellings is enumerated when there are at most ``limit``; else ``draws`` random ones
  (fixed ``seed``), p = (count + 1) / (draws + 1). ``statistic`` reduces along ``axis``
  (vectorised, as scipy's ``vectorized=True``). Ties count as at least as extreme (relative
  tolerance 100 eps, as scipy); "two-sided" is 2 * min(one-sided p), capped at 1 (scipy's
  definition, so the two agree)."""
  a, b = _sample(a, "a"), _sample(b, "b")
  _alternative(alternative)
  z = np.concatenate([a, b])
  n1, n = a.size, a.size + b.size
  observed = float(statistic(a, b, axis=-1))
  total = math.comb(n, n1)
  if total <= limit:
    idx_Rxn1 = np.array(list(itertools.combinations(range(n), n1)), int).reshape(total, n1)
    in_a_RxN = np.zeros((total, n), bool)
    np.put_along_axis(in_a_RxN, idx_Rxn1, True, axis=1)
    null_R = _two_sample_null(z, in_a_RxN, n1, statistic)
    return PValue(_p_value(null_R, observed, alternative, exact=True), True, total)
  gen = np.random.default_rng(seed)
  null = []
  for chunk in _chunks(draws):
    in_a_RxN = np.argsort(gen.random((chunk, n)), axis=1) < n1
    null.append(_two_sample_null(z, in_a_RxN, n1, statistic))
  return PValue(_p_value(np.concatenate(null), observed, alternative, exact=False), False, draws)


def paired_permutation_test(a, b, statistic: Callable = np.mean,
                            alternative: str = "two-sided", limit: int = EXACT_LIMIT,
                            draws: int = MC_DRAWS, seed: int = SEED) -> PValue:
  """Sign-flip test of ``statistic(a - b, axis)`` for two arms paired by seed (the same seed
  drives both): under no effect each seed's difference is as likely negated, so all 2^n sign
  patterns are enumerated (Monte Carlo beyond ``limit``, as ``exact_permutation_test``).
  Pairing removes the seed-to-seed spread the two arms share."""
  a, b = _sample(a, "a"), _sample(b, "b")
  if a.shape != b.shape:
    raise ValueError(f"paired_permutation_test: {a.size} and {b.size} seeds; pairs need equal")
  _alternative(alternative)
  d = a - b
  n = d.size
  observed = float(statistic(d, axis=-1))
  if 2 ** n <= limit:
    signs_RxN = 1 - 2 * ((np.arange(2 ** n)[:, None] >> np.arange(n)) & 1)
    null_R = statistic(signs_RxN * d, axis=-1)
    return PValue(_p_value(null_R, observed, alternative, exact=True), True, 2 ** n)
  gen = np.random.default_rng(seed)
  null = [statistic(gen.choice([-1.0, 1.0], size=(chunk, n)) * d, axis=-1)
          for chunk in _chunks(draws)]
  return PValue(_p_value(np.concatenate(null), observed, alternative, exact=False), False, draws)


def _two_sample_null(z, in_a_RxN, n1, statistic):
  rows = in_a_RxN.shape[0]
  x = np.broadcast_to(z, in_a_RxN.shape)[in_a_RxN].reshape(rows, n1)
  y = np.broadcast_to(z, in_a_RxN.shape)[~in_a_RxN].reshape(rows, z.size - n1)
  return np.asarray(statistic(x, y, axis=-1), float)


def _p_value(null_R, observed: float, alternative: str, exact: bool) -> float:
  gamma = abs(observed) * np.finfo(float).eps * 100
  add = 0 if exact else 1           # Monte Carlo: the observed labelling counts as one draw
  greater = ((null_R >= observed - gamma).sum() + add) / (null_R.size + add)
  less = ((null_R <= observed + gamma).sum() + add) / (null_R.size + add)
  p = {"greater": greater, "less": less, "two-sided": 2 * min(greater, less)}[alternative]
  return float(min(p, 1.0))


def _chunks(draws: int, size: int = 20_000):
  for start in range(0, draws, size):
    yield min(size, draws - start)


# --- intervals of a mean or any statistic ----------------------------------------------------

def t_interval(values, level: float = LEVEL) -> tuple[float, float, float]:
  """(mean, lo, hi) by Student's t with n - 1 degrees of freedom: where per-seed values are
  roughly normal, its width accounts for the few seeds a bootstrap cannot see past. One seed:
  NaN bounds; all values equal: the mean for both."""
  v = _sample(values, "values")
  _level(level)
  m = float(v.mean())
  if v.size < 2:
    return m, math.nan, math.nan
  half = float(stats.t.ppf(1 - (1 - level) / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
  return m, m - half, m + half


def bca_interval(values, statistic: Callable = np.mean, level: float = LEVEL,
                 draws: int = DRAWS, seed: int = SEED) -> tuple[float, float, float]:
  """(statistic, lo, hi) by the bias-corrected and accelerated bootstrap (jackknife
  acceleration): second-order accurate where the percentile interval is first-order, so it
  corrects a skewed or biased statistic that the percentile bootstrap leaves shifted.
  ``statistic(x, axis)`` reduces along ``axis`` (np.mean, np.median). Degenerate draws (all
  equal, e.g. every seed at 1.0) give the point for both bounds; where the bias correction
  is infinite (every draw on one side of the point) the bounds are NaN, as in scipy."""
  v = _sample(values, "values")
  _level(level)
  gen = np.random.default_rng(seed)
  theta = float(statistic(v, axis=-1))
  boot_B = np.asarray(statistic(v[gen.integers(0, v.size, (draws, v.size))], axis=-1), float)
  if np.ptp(boot_B) == 0 and boot_B[0] == theta:
    return theta, theta, theta
  jack_N = np.array([statistic(np.delete(v, i), axis=-1) for i in range(v.size)], float)
  lo, hi = _bca_bounds(theta, boot_B, [jack_N], level)
  return theta, lo, hi


def _bca_bounds(theta: float, boot_B, jackknives, level: float) -> tuple[float, float]:
  """BCa bounds from the bootstrap draws and one jackknife per sample (the multi-sample
  acceleration of scipy's ``bootstrap``; one sample: sum d^3 / (6 (sum d^2)^1.5))."""
  if np.ptp(boot_B) == 0 and boot_B[0] == theta:
    return theta, theta
  if not (np.isfinite(boot_B).all() and all(np.isfinite(j).all() for j in jackknives)):
    raise ValueError("BCa needs finite values (censored seeds at +inf: use the percentile)")
  z0 = stats.norm.ppf(((boot_B < theta).sum() + (boot_B <= theta).sum()) / (2 * boot_B.size))
  if not np.isfinite(z0):
    return math.nan, math.nan
  num = den = 0.0
  for jack in jackknives:
    n = jack.size
    u = (n - 1) * (jack.mean() - jack)
    num += (u ** 3).sum() / n ** 3
    den += (u ** 2).sum() / n ** 2
  acc = num / (6 * den ** 1.5) if den > 0 else 0.0
  z = stats.norm.ppf([(1 - level) / 2, 1 - (1 - level) / 2])
  alphas = stats.norm.cdf(z0 + (z0 + z) / (1 - acc * (z0 + z)))
  lo, hi = np.quantile(boot_B, alphas, method="inverted_cdf")
  return float(lo), float(hi)


# --- many verdicts ---------------------------------------------------------------------------

def holm(p_values: dict[str, float], alpha: float = 0.05) -> dict[str, tuple[float, bool]]:
  """Holm-Bonferroni step-down over a report's claims: {claim: (adjusted p, rejected)}, the
  family-wise error held at ``alpha`` whatever the dependence between claims (52 verdicts at
  0.05 each would give ~2.6 false ones). Adjusted p: the running max of (m - i) p_(i),
  capped at 1, so it is monotone in p; rejected: adjusted p <= alpha."""
  p = {k: float(v) for k, v in p_values.items()}
  if any(not 0 <= v <= 1 for v in p.values()):       # NaN fails too
    raise ValueError(f"holm: p-values must lie in [0, 1], got {p}")
  m, running, out = len(p), 0.0, {}
  for i, key in enumerate(sorted(p, key=p.get)):
    running = max(running, min(1.0, (m - i) * p[key]))
    out[key] = (running, running <= alpha)
  return {k: out[k] for k in p}


# --- the slowest over the fastest arm --------------------------------------------------------

def bootstrap_extremes_ratio(arms: dict, pick: str = "max/min of medians", level: float = LEVEL,
                             draws: int = DRAWS, seed: int = SEED,
                             method: str = "percentile") -> tuple[float, float, float]:
  """(max/min of the arms' medians, lo, hi), the pick of the slowest and fastest arm redone in
  every draw (seeds resampled within each arm), so the pick is part of the resampled
  statistic; ``method`` "percentile" or "bca". Censored seeds at +inf: a censored median over
  a finite one is inf, all medians censored counts as 1.

  Read its lower bound with care: max/min is >= 1 by construction and biased upward when arms
  are alike, and the re-picked draws are >= the fixed-pick ones, so its interval sits higher,
  not lower, than a pick-then-bootstrap (arms from one distribution: it never covers 1).
  What it measures honestly is that bias (``estimate`` against the draws); for a verdict that
  the arms differ by more than a margin use ``simultaneous_extremes_ratio``."""
  center, names = _pick(pick), list(arms)
  values = [_sample(arms[k], f"arm {k}") for k in names]
  if len(values) < 2:
    raise ValueError("bootstrap_extremes_ratio: needs at least two arms")
  if method not in ("percentile", "bca"):
    raise ValueError(f"bootstrap_extremes_ratio: method {method!r}, not percentile or bca")
  _level(level)

  def extremes(centers_KxB):
    return _ratio(centers_KxB.max(axis=0), centers_KxB.min(axis=0))

  theta = float(extremes(np.array([center(v) for v in values])[:, None])[0])
  gen = np.random.default_rng(seed)
  boot_KxB = np.stack([center(v[gen.integers(0, v.size, (draws, v.size))], axis=-1)
                       for v in values])
  boot_B = extremes(boot_KxB)
  if method == "percentile":
    a = (1 - level) / 2
    lo, hi = np.quantile(boot_B, [a, 1 - a], method="inverted_cdf")
    return theta, float(lo), float(hi)
  point = np.array([center(v) for v in values])
  jackknives = []
  for j, v in enumerate(values):
    jack = []
    for i in range(v.size):
      c = point.copy()
      c[j] = center(np.delete(v, i))
      jack.append(extremes(c[:, None])[0])
    jackknives.append(np.array(jack, float))
  lo, hi = _bca_bounds(theta, boot_B, jackknives, level)
  return theta, lo, hi


def simultaneous_extremes_ratio(arms: dict, pick: str = "max/min of medians",
                                level: float = LEVEL, draws: int = 4 * DRAWS,
                                seed: int = SEED) -> tuple[float, float, float]:
  """(max/min of the arms' centers, lo, hi) with lo, hi the largest lower and upper bounds of
  every pair's ratio (center_i / center_j, percentile bootstrap, Bonferroni over the K(K-1)/2
  pairs): if every pair's interval covers its ratio, the true largest ratio lies between
  them, so the pick costs the multiplicity and no more. Unlike the re-picked percentile it
  covers 1 when the arms are alike. The pairs' tails are (1 - level) / K(K-1) each: ``draws``
  must put some draws beyond them (a ValueError says how many are needed)."""
  center, names = _pick(pick), list(arms)
  values = [_sample(arms[k], f"arm {k}") for k in names]
  k = len(values)
  if k < 2:
    raise ValueError("simultaneous_extremes_ratio: needs at least two arms")
  _level(level)
  tail = (1 - level) / (k * (k - 1))
  if draws * tail < 5:
    raise ValueError(f"simultaneous_extremes_ratio: {draws} draws put fewer than 5 in a tail "
                     f"of {tail:.2g}; use at least {math.ceil(5 / tail)}")
  point = np.array([center(v) for v in values])
  theta = float(_ratio(point.max(), point.min()))
  gen = np.random.default_rng(seed)
  boot_KxB = np.stack([center(v[gen.integers(0, v.size, (draws, v.size))], axis=-1)
                       for v in values])
  los, his = [], []
  for i, j in itertools.permutations(range(k), 2):
    lo, hi = np.quantile(_ratio(boot_KxB[i], boot_KxB[j]), [tail, 1 - tail], method="inverted_cdf")
    los.append(lo)
    his.append(hi)
  return theta, float(max(los)), float(max(his))


def _pick(pick: str):
  if pick not in PICKS:
    raise ValueError(f"extremes ratio: pick {pick!r}, not one of {sorted(PICKS)}")
  return PICKS[pick]


def _ratio(x, y):
  """x / y elementwise, inf / inf (both censored: nothing measured) as 1."""
  x, y = np.asarray(x, float), np.asarray(y, float)
  with np.errstate(invalid="ignore", divide="ignore"):
    r = x / y
  return np.where(np.isinf(x) & np.isinf(y), 1.0, r)


# --- input checks ----------------------------------------------------------------------------

def _sample(values, name: str) -> np.ndarray:
  v = np.asarray(values, float).ravel()
  if v.size == 0 or np.isnan(v).any():
    raise ValueError(f"{name}: needs at least one value and no NaN, got {values!r}")
  return v


def _count(k, n) -> tuple[int, int]:
  if int(k) != k or int(n) != n or not 0 <= k <= n or n < 1:
    raise ValueError(f"needs whole counts 0 <= k <= n, n >= 1; got k={k}, n={n}")
  return int(k), int(n)


def _level(level: float):
  if not 0 < level < 1:
    raise ValueError(f"level {level} is not in (0, 1)")


def _alternative(alternative: str):
  if alternative not in ALTERNATIVES:
    raise ValueError(f"alternative {alternative!r}, not one of {ALTERNATIVES}")
