"""Every registered claim judged by ``protocol.RULE`` from per-seed values: the test the
claim names (``protocol.TESTS``), its effect with an interval, its p (Holm-adjusted over the
finding's secondary claims) and the verdict, with the outcomes RULE names apart."""

import dataclasses
import math

import numpy as np
from scipy import stats

from experiments.confirmatory import protocol as P
from experiments.toy_study import small_n as S

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"
NO_RETRIEVAL = "inconclusive: model does not retrieve"
NEVER_LEARNS = "never learns"
MIN_RETRIEVING = 3
DRAWS = 2000


@dataclasses.dataclass
class Result:
  claim: P.Claim
  effect: float = math.nan
  lo: float = math.nan
  hi: float = math.nan
  p: float | None = None          # the test's (for a secondary claim: before Holm)
  p_holm: float | None = None
  n: str = ""                     # seeds behind it, per arm
  verdict: str = INCONCLUSIVE
  note: str = ""


def _clean(v) -> np.ndarray:
  return np.array([x for x in v if x is not None], float)


def rank_difference(x, y, axis=-1):
  """Mean rank of ``x`` minus mean rank of ``y`` in the pooled sample (ties, censored +inf
  included, share their rank): Gehan's statistic at one common censoring point."""
  z = np.concatenate([x, y], axis=axis)
  r = stats.rankdata(z, axis=axis)
  n1 = np.shape(x)[axis]
  return r[..., :n1].mean(axis=-1) - r[..., n1:].mean(axis=-1)


def _ratio_of_medians(fast, slow, draws=DRAWS, seed=S.SEED):
  gen = np.random.default_rng(seed)
  def ratio(f, s):
    mf, ms = np.median(f, axis=-1), np.median(s, axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
      return np.where(np.isinf(ms) & np.isinf(mf), np.nan, ms / mf)
  point = float(ratio(fast, slow))
  boot = ratio(fast[gen.integers(0, fast.size, (draws, fast.size))],
               slow[gen.integers(0, slow.size, (draws, slow.size))])
  boot = boot[~np.isnan(boot)]
  if not boot.size:
    return point, math.nan, math.nan
  return point, float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))


def gehan(claim, fast, slow) -> Result:
  """Tokens to a threshold (+inf: never), the second arm predicted slower."""
  fast, slow = _clean(fast), _clean(slow)
  r = Result(claim, n=f"{fast.size} + {slow.size}")
  if fast.size < 2 or slow.size < 2:
    r.note = "not measured"
    return r
  r.effect, r.lo, r.hi = _ratio_of_medians(fast, slow)
  r.p = S.exact_permutation_test(slow, fast, rank_difference, "greater").p
  learned = (int(np.isfinite(fast).sum()), int(np.isfinite(slow).sum()))
  r.note = (f"learns by the budget: {learned[0]}/{fast.size} against {learned[1]}/{slow.size}; "
            "effect: ratio of medians (slow / fast)")
  if claim.delay and learned[1] == 0:
    r.verdict = NEVER_LEARNS if learned[0] else INCONCLUSIVE
    r.note += "; the slower arm never reaches the threshold" + ("" if learned[0] else ", nor the other")
  return r


def fisher(claim, base, treat) -> Result:
  base, treat = _clean(base), _clean(treat)
  k1, n1 = S.success_count(base, P.RETRIEVES)
  k2, n2 = S.success_count(treat, P.RETRIEVES)
  r = Result(claim, n=f"{n1} + {n2}")
  r.p = float(stats.fisher_exact([[k2, n2 - k2], [k1, n1 - k1]], alternative="greater").pvalue)
  r.effect = k2 / n2 - k1 / n1
  gen = np.random.default_rng(S.SEED)
  boot = gen.binomial(n2, k2 / n2, DRAWS) / n2 - gen.binomial(n1, k1 / n1, DRAWS) / n1
  r.lo, r.hi = float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))
  cp = [S.clopper_pearson(k, n) for k, n in ((k1, n1), (k2, n2))]
  r.note = (f"retrieve: {k1}/{n1} [{cp[0][0]:.2f}, {cp[0][1]:.2f}] against "
            f"{k2}/{n2} [{cp[1][0]:.2f}, {cp[1][1]:.2f}] (Clopper-Pearson)")
  return r


def sign_flip(claim, base, treat) -> Result:
  """Arms paired by seed (``base``/``treat``: {seed: value}); the effect treat - base."""
  seeds = sorted(s for s in base if base[s] is not None and treat.get(s) is not None)
  d = np.array([treat[s] - base[s] for s in seeds], float)
  r = Result(claim, n=f"{d.size} pairs")
  if d.size < 2:
    r.note = "not measured"
    return r
  r.effect, r.lo, r.hi = S.bca_interval(d)
  alt = "greater" if claim.side == "above" else "less"
  r.p = S.paired_permutation_test(d - claim.margin, np.zeros_like(d), alternative=alt).p
  return r


def one_sample(claim, values) -> Result:
  v = _clean(values)
  r = Result(claim, n=f"{v.size}")
  if v.size < 2:
    r.note = "not measured"
    return r
  r.effect, r.lo, r.hi = S.t_interval(v)
  alt = "greater" if claim.side == "above" else "less"
  r.p = S.paired_permutation_test(v - claim.margin, np.zeros_like(v), alternative=alt).p
  return r


def tost(claim, a, b) -> Result:
  """|mean(b) - mean(a)| within the margin: two one-sided Welch t tests."""
  a, b = _clean(a), _clean(b)
  r = Result(claim, n=f"{a.size} + {b.size}")
  if a.size < 2 or b.size < 2:
    r.note = "not measured"
    return r
  m = claim.margin
  r.effect = float(b.mean() - a.mean())
  if a.std() == 0 and b.std() == 0:
    r.lo = r.hi = r.effect
    r.note = "no spread in either arm: no test"
    return r
  res = stats.ttest_ind(b, a, equal_var=False)
  ci = res.confidence_interval(0.90)
  r.lo, r.hi = float(ci.low), float(ci.high)
  p_low = stats.ttest_ind(b + m, a, equal_var=False, alternative="greater").pvalue
  p_high = stats.ttest_ind(b - m, a, equal_var=False, alternative="less").pvalue
  r.p = float(max(p_low, p_high))
  r.note = "interval: 90% Welch t (the two one-sided tests at 0.05)"
  return r


def permutation(claim, a, b) -> Result:
  a, b = _clean(a), _clean(b)
  r = Result(claim, n=f"{a.size} + {b.size}")
  if a.size < 2 or b.size < 2:
    r.note = "not measured"
    return r
  r.effect = float(b.mean() - a.mean())
  gen = np.random.default_rng(S.SEED)
  boot = (b[gen.integers(0, b.size, (DRAWS, b.size))].mean(1)
          - a[gen.integers(0, a.size, (DRAWS, a.size))].mean(1))
  r.lo, r.hi = float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))
  alt = "greater" if claim.side == "above" else "less"
  r.p = S.exact_permutation_test(b - claim.margin, a, alternative=alt).p
  return r


def bootstrap(claim, a_pairs, b_pairs, statistic) -> Result:
  """``statistic(a_SxR, b_SxR)`` of two unpaired arms' per-seed rows (e.g. reads at two
  budgets), seeds resampled within each arm."""
  a = np.array([p for p in a_pairs if None not in p], float)
  b = np.array([p for p in b_pairs if None not in p], float)
  r = Result(claim, n=f"{len(a)} + {len(b)}")
  if len(a) < 2 or len(b) < 2:
    r.note = "not measured"
    return r
  gen = np.random.default_rng(S.SEED)
  r.effect = float(statistic(a[None], b[None])[0])
  boot = statistic(a[gen.integers(0, len(a), (DRAWS, len(a)))], b[gen.integers(0, len(b), (DRAWS, len(b)))])
  r.lo, r.hi = float(np.quantile(boot, 0.025)), float(np.quantile(boot, 0.975))
  r.p = float((boot <= claim.margin).mean()) if claim.side == "above" else float((boot >= claim.margin).mean())
  return r


def decide(r: Result, p: float | None) -> str:
  """RULE, once the test has run (``p``: Holm-adjusted for a secondary claim)."""
  if r.verdict in (NEVER_LEARNS, NO_RETRIEVAL) or p is None or math.isnan(r.effect):
    return r.verdict if r.verdict in (NEVER_LEARNS, NO_RETRIEVAL) else INCONCLUSIVE
  c, m = r.claim, r.claim.margin
  if c.test == "gehan":
    m = 1.0                                   # its effect is printed as a ratio of medians
  if c.side == "within":
    if p < P.ALPHA:
      return REPRODUCED
    return NOT_REPRODUCED if (r.lo > m or r.hi < -m) else INCONCLUSIVE
  if c.side == "above":
    if p < P.ALPHA and r.effect > m:
      return REPRODUCED
    return NOT_REPRODUCED if r.hi <= m else INCONCLUSIVE
  if p < P.ALPHA and r.effect < m:
    return REPRODUCED
  return NOT_REPRODUCED if r.lo >= m else INCONCLUSIVE


def retrieving(values, uncapped) -> tuple[list, str]:
  """The values of the seeds that retrieve (uncapped far acc >= RETRIEVES), and the count."""
  keep = [v for v, u in zip(values, uncapped) if v is not None and u is not None and u >= P.RETRIEVES]
  return keep, f"{len(keep)} of {sum(u is not None for u in uncapped)} seeds retrieve"


def finish(primary: Result, secondary: list[Result]) -> list[Result]:
  """Holm over the secondary claims that have a p, then every verdict."""
  primary.verdict = decide(primary, primary.p)
  tested = {i: r.p for i, r in enumerate(secondary) if r.p is not None}
  adjusted = S.holm({str(i): p for i, p in tested.items()}) if tested else {}
  for i, r in enumerate(secondary):
    if str(i) in adjusted:
      r.p_holm = adjusted[str(i)][0]
    r.verdict = decide(r, r.p_holm)
  return [primary, *secondary]
