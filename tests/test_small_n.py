"""experiments.toy_study.small_n: each function against an independent computation (scipy, a
brute-force enumeration written here, a hand-worked example) or a simulation with a fixed
seed."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from experiments.toy_study import small_n as S


# --- Clopper-Pearson, counts, Fisher ---------------------------------------------------------

@pytest.mark.parametrize("n", [1, 3, 7, 20])
@pytest.mark.parametrize("level", [0.95, 0.9])
def test_clopper_pearson_equals_scipys_exact_binomial_interval(n, level):
  for k in range(n + 1):
    ci = stats.binomtest(k, n).proportion_ci(confidence_level=level, method="exact")
    assert S.clopper_pearson(k, n, level) == pytest.approx((ci.low, ci.high), abs=1e-10)


def test_clopper_pearson_at_no_and_all_successes_of_seven_is_the_closed_form():
  assert S.clopper_pearson(0, 7) == (0.0, pytest.approx(1 - 0.025 ** (1 / 7), abs=1e-12))
  assert S.clopper_pearson(7, 7) == (pytest.approx(0.025 ** (1 / 7), abs=1e-12), 1.0)


def coverage_by_simulation(interval, n, p_grid, trials, seed=0):
  """Share of simulated counts whose interval covers the true p, per p (the intervals of the
  n + 1 possible counts computed once)."""
  gen = np.random.default_rng(seed)
  table = np.array([interval(k, n) for k in range(n + 1)])
  out = []
  for p in p_grid:
    k = gen.binomial(n, p, size=trials)
    out.append(np.mean((table[k, 0] <= p) & (p <= table[k, 1])))
  return np.array(out)


def test_clopper_pearson_covers_at_least_95_percent_at_seven_seeds_over_a_grid_of_rates():
  p_grid = np.linspace(0.01, 0.99, 99)
  trials = 20_000
  slack = 3 * math.sqrt(0.95 * 0.05 / trials)
  cover = coverage_by_simulation(S.clopper_pearson, 7, p_grid, trials)
  assert cover.min() >= 0.95 - slack, p_grid[cover.argmin()]
  exact = [sum(stats.binom.pmf(k, 7, p) for k in range(8)
               if S.clopper_pearson(k, 7)[0] <= p <= S.clopper_pearson(k, 7)[1]) for p in p_grid]
  assert min(exact) >= 0.95

  def wald(k, n):                          # the normal approximation the check must catch
    q, half = k / n, 1.96 * math.sqrt(k / n * (1 - k / n) / n)
    return q - half, q + half
  assert coverage_by_simulation(wald, 7, p_grid, trials).min() < 0.9


def test_clopper_pearson_refuses_impossible_counts():
  for k, n in [(8, 7), (-1, 7), (0, 0), (1.5, 7)]:
    with pytest.raises(ValueError):
      S.clopper_pearson(k, n)


def test_success_count_counts_seeds_at_or_above_the_threshold():
  final_far_acc = [1.0, 0.98, 0.02, 0.9, 0.0, 0.99, 0.05]
  assert S.success_count(final_far_acc, 0.9) == (4, 7)
  assert S.success_count([math.inf, 3.0], 5.0) == (1, 2)
  with pytest.raises(ValueError):
    S.success_count([1.0, math.nan], 0.5)


def test_fisher_exact_equals_a_hypergeometric_sum_written_here():
  def brute(k1, n1, k2, n2):
    total, k = n1 + n2, k1 + k2
    pmf = lambda x: math.comb(n1, x) * math.comb(n2, k - x) / math.comb(total, k)
    support = range(max(0, k - n2), min(k, n1) + 1)
    return sum(pmf(x) for x in support if pmf(x) <= pmf(k1) * (1 + 1e-7))
  assert S.fisher_exact_two_sided(7, 7, 0, 7) == pytest.approx(2 / math.comb(14, 7))
  for args in [(5, 7, 1, 7), (3, 7, 3, 7), (0, 3, 3, 3), (6, 9, 2, 8)]:
    assert S.fisher_exact_two_sided(*args) == pytest.approx(min(1.0, brute(*args)))


# --- permutation tests -----------------------------------------------------------------------

def brute_force_two_sample(a, b, stat):
  """Every ordering of the pooled values, the first len(a) read as arm a (each relabelling
  counted len(a)! len(b)! times, the same share): (P(T >= t), P(T <= t))."""
  z, t = list(a) + list(b), stat(np.array(a), np.array(b))
  null = [stat(np.array(p[:len(a)]), np.array(p[len(a):])) for p in itertools.permutations(z)]
  null = np.array(null)
  return np.mean(null >= t - 1e-12), np.mean(null <= t + 1e-12)


def test_permutation_test_p_equals_a_brute_force_enumeration_of_orderings():
  a, b = [0.9, 1.4, 2.2], [0.1, 0.5, 1.4, 0.3]
  diff = lambda x, y: x.mean() - y.mean()
  greater, less = brute_force_two_sample(a, b, diff)
  assert S.exact_permutation_test(a, b, alternative="greater").p == pytest.approx(greater)
  assert S.exact_permutation_test(a, b, alternative="less").p == pytest.approx(less)
  res = S.exact_permutation_test(a, b)
  assert res.p == pytest.approx(min(1, 2 * min(greater, less)))
  assert res.exact and res.relabellings == math.comb(7, 3)
  assert greater == pytest.approx(3 / 35)    # {0.9, 1.4, 2.2} with either 1.4, {1.4, 1.4, 2.2}


@pytest.mark.parametrize("alternative", S.ALTERNATIVES)
def test_permutation_test_equals_scipys_exact_permutation_test(alternative):
  gen = np.random.default_rng(3)
  a, b = gen.lognormal(0, 1, 6), np.append(gen.lognormal(0.5, 1, 6), 1.0)
  a[0] = 1.0                                   # a tie across the arms
  def median_diff(x, y, axis=-1):
    return np.median(x, axis=axis) - np.median(y, axis=axis)
  for stat in (S.mean_difference, median_diff):
    ref = stats.permutation_test((a, b), stat, permutation_type="independent", vectorized=True,
                                 n_resamples=np.inf, alternative=alternative)
    ours = S.exact_permutation_test(a, b, stat, alternative)
    assert ours.exact and ours.p == pytest.approx(ref.pvalue, rel=1e-12)


def test_permutation_test_beyond_the_limit_is_a_stated_seeded_monte_carlo_near_the_exact_p():
  gen = np.random.default_rng(4)
  a, b = gen.normal(0.8, 1, 7), gen.normal(0, 1, 7)
  exact = S.exact_permutation_test(a, b)
  mc = S.exact_permutation_test(a, b, limit=1000, draws=20_000)
  assert not mc.exact and mc.relabellings == 20_000 and "Monte Carlo, 20,000" in mc.method
  assert mc.p == pytest.approx(exact.p, abs=4 * math.sqrt(exact.p / 20_000) + 1e-3)
  assert mc == S.exact_permutation_test(a, b, limit=1000, draws=20_000)     # byte-stable
  assert "exact, 3,432" in exact.method


def test_monte_carlo_p_counts_the_observed_labelling_so_it_is_never_zero():
  a, b = np.arange(10.0, 17.0), np.arange(7.0)          # exact p: 1 / C(14, 7)
  mc = S.exact_permutation_test(a, b, alternative="greater", limit=10, draws=2000)
  assert mc.p >= 1 / 2001
  assert S.exact_permutation_test(a, b, alternative="greater").p == pytest.approx(1 / 3432)


def test_permutation_test_counts_ties_lost_to_rounding_as_ties():
  a, b = [0.9, 0.5, 0.3, 0.4], [0.0, 0.1, 0.7, 0.6]   # relabellings tying it but for the last bit
  diff = lambda x, y: x.mean() - y.mean()
  greater, less = brute_force_two_sample(a, b, diff)
  assert S.exact_permutation_test(a, b, alternative="greater").p == pytest.approx(greater)
  assert S.exact_permutation_test(a, b, alternative="less").p == pytest.approx(less)


def test_sign_flip_test_equals_brute_force_and_scipys_paired_test():
  a = np.array([0.91, 0.12, 0.95, 0.88, 0.40, 0.99, 0.73])
  b = np.array([0.85, 0.15, 0.60, 0.80, 0.38, 0.90, 0.75])
  d = a - b
  null = np.array([np.mean(np.array(s) * d) for s in itertools.product([-1, 1], repeat=7)])
  greater, less = np.mean(null >= d.mean() - 1e-12), np.mean(null <= d.mean() + 1e-12)
  for alternative, want in [("greater", greater), ("less", less),
                            ("two-sided", min(1, 2 * min(greater, less)))]:
    ours = S.paired_permutation_test(a, b, alternative=alternative)
    assert ours.exact and ours.relabellings == 128 and ours.p == pytest.approx(want)
    ref = stats.permutation_test((a, b), lambda x, y, axis: np.mean(x - y, axis=axis),
                                 permutation_type="samples", vectorized=True,
                                 n_resamples=np.inf, alternative=alternative)
    assert ours.p == pytest.approx(ref.pvalue, rel=1e-12)


def test_paired_test_needs_equal_arms_and_tests_refuse_an_unknown_alternative():
  with pytest.raises(ValueError):
    S.paired_permutation_test([1, 2, 3], [1, 2])
  with pytest.raises(ValueError):
    S.exact_permutation_test([1, 2], [3, 4], alternative="bigger")


# --- t and BCa intervals ---------------------------------------------------------------------

def test_t_interval_equals_scipys_t_distribution():
  v = np.array([0.91, 0.12, 0.95, 0.88, 0.40, 0.99, 0.73])
  for level in (0.95, 0.8):
    lo, hi = stats.t.interval(level, v.size - 1, loc=v.mean(), scale=stats.sem(v))
    assert S.t_interval(v, level) == pytest.approx((v.mean(), lo, hi), abs=1e-12)
  assert S.t_interval([0.5, 0.5, 0.5]) == (0.5, 0.5, 0.5)
  m, lo, hi = S.t_interval([0.5])
  assert m == 0.5 and math.isnan(lo) and math.isnan(hi)


@pytest.mark.parametrize("statistic", [np.mean, np.median, np.var])
def test_bca_agrees_with_scipys_bca_on_a_skewed_sample(statistic):
  x = np.random.default_rng(5).lognormal(0, 1, 25)
  est, lo, hi = S.bca_interval(x, statistic, draws=20_000)
  ref = stats.bootstrap((x,), statistic, method="BCa", n_resamples=20_000, rng=11,
                        vectorized=True).confidence_interval
  width = ref.high - ref.low
  assert est == pytest.approx(statistic(x))
  assert lo == pytest.approx(ref.low, abs=0.06 * width)
  assert hi == pytest.approx(ref.high, abs=0.06 * width)
  if statistic is np.mean:                  # and it moved right of the percentile interval
    idx = np.random.default_rng(0).integers(0, x.size, (20_000, x.size))
    p_lo, p_hi = np.quantile(x[idx].mean(axis=1), [0.025, 0.975])
    assert lo > p_lo and hi > p_hi


def test_bca_of_the_mean_of_symmetric_data_is_close_to_the_percentile_interval():
  half = np.random.default_rng(6).normal(0, 1, 8)
  x = np.concatenate([half, -half]) + 3.0         # exactly symmetric: no skew, no acceleration
  est, lo, hi = S.bca_interval(x, np.mean, draws=20_000)
  idx = np.random.default_rng(0).integers(0, x.size, (20_000, x.size))
  p_lo, p_hi = np.quantile(x[idx].mean(axis=1), [0.025, 0.975])
  assert est == pytest.approx(3.0)
  assert lo == pytest.approx(p_lo, abs=0.03 * (p_hi - p_lo))
  assert hi == pytest.approx(p_hi, abs=0.03 * (p_hi - p_lo))


def test_bca_of_degenerate_samples_is_the_point_and_is_byte_stable():
  assert S.bca_interval([1.0] * 7) == (1.0, 1.0, 1.0)
  assert S.bca_interval([0.3]) == (0.3, 0.3, 0.3)
  x = [0.1, 0.9, 1.0, 0.95, 0.05, 1.0, 0.97]
  assert S.bca_interval(x, draws=2000) == S.bca_interval(x, draws=2000)


# --- Holm ------------------------------------------------------------------------------------

def test_holm_matches_the_hand_computed_step_down():
  # sorted: d .005*4 = .02, a .01*3 = .03, c .03*2 = .06, b .04*1 = .04 -> max(.06, .04) = .06
  out = S.holm({"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005}, alpha=0.05)
  assert list(out) == ["a", "b", "c", "d"]
  want = {"a": (0.03, True), "b": (0.06, False), "c": (0.06, False), "d": (0.02, True)}
  for k, (p, rejected) in want.items():
    assert out[k][0] == pytest.approx(p) and out[k][1] is rejected


def test_holm_adjusted_p_is_monotone_in_p_and_capped_at_one():
  p = dict(zip("abcdefgh", np.random.default_rng(7).uniform(0, 0.4, 8)))
  out = S.holm(p)
  order = sorted(p, key=p.get)
  adjusted = [out[k][0] for k in order]
  assert adjusted == sorted(adjusted) and max(adjusted) <= 1.0
  assert all(out[k][0] >= p[k] for k in p)
  assert S.holm({"x": 0.6, "y": 0.7}) == {"x": (1.0, False), "y": (1.0, False)}
  assert S.holm({}) == {}
  with pytest.raises(ValueError):
    S.holm({"x": math.nan})


# --- the slowest over the fastest arm --------------------------------------------------------

def pick_then_bootstrap(arms_KxS, draws, gen):
  """The reviewed statistic: the slowest and fastest arm picked on the point medians, then
  only those two arms' ratio bootstrapped (percentile)."""
  med = np.median(arms_KxS, axis=1)
  i, j = med.argmax(), med.argmin()
  n = arms_KxS.shape[1]
  mi = np.median(arms_KxS[i][gen.integers(0, n, (draws, n))], axis=1)
  mj = np.median(arms_KxS[j][gen.integers(0, n, (draws, n))], axis=1)
  return np.quantile(mi / mj, [0.025, 0.975])


def test_extremes_ratio_intervals_on_arms_from_one_distribution():
  """Four arms of seven seeds from one distribution (true ratio 1), 200 studies: the
  simultaneous interval covers 1 about 97% of the time (>= 93%: 95% less the simulation's
  error), far more often than the pick-then-bootstrap excludes it (about 12%, not 5%); the
  re-picked percentile interval, max/min being >= 1 and the re-pick only adding to it, never
  covers 1."""
  gen = np.random.default_rng(8)
  studies = 200
  sim_covers = repick_covers = fixed_excludes = 0
  for s in range(studies):
    arms_KxS = gen.lognormal(0, 0.5, (4, 7))
    arms = dict(zip("wxyz", arms_KxS))
    _, lo, hi = S.simultaneous_extremes_ratio(arms, draws=1500, seed=s)
    sim_covers += lo <= 1 <= hi
    _, lo, hi = S.bootstrap_extremes_ratio(arms, draws=300, seed=s)
    repick_covers += lo <= 1 <= hi
    lo, hi = pick_then_bootstrap(arms_KxS, 300, gen)
    fixed_excludes += not lo <= 1 <= hi
  assert sim_covers / studies >= 0.93
  assert fixed_excludes / studies >= 0.07
  assert repick_covers == 0


def test_extremes_ratio_redoes_the_pick_in_every_draw():
  """Two close arms and one far one: the re-picked draws are max/min of every arm's draw, so
  never below the fixed pair's (the same seed draws the same indices): its interval lies
  above the one of the pair picked on the point medians (a fixed pick would equal it)."""
  arms = {"a": [1.0, 1.1, 0.9, 1.05, 0.95, 1.2, 0.8], "b": [1.0, 1.3, 0.7, 1.1, 0.9, 1.4, 0.6],
          "c": [3.0, 2.5, 3.5, 2.8, 3.2, 2.0, 4.0]}
  est, lo, hi = S.bootstrap_extremes_ratio(arms, draws=2000)
  assert est == pytest.approx(3.0)
  gen = np.random.default_rng(S.SEED)
  med = {k: np.median(np.asarray(v)[gen.integers(0, 7, (2000, 7))], axis=1)
         for k, v in arms.items()}
  fixed = np.quantile(med["c"] / med["a"], [0.025, 0.975], method="inverted_cdf")
  assert lo > fixed[0] and hi > fixed[1]


def test_simultaneous_extremes_ratio_covers_a_real_spread_and_finds_it():
  """One arm 3x slower than three alike (true ratio 3): the interval covers 3 at least 95% of
  60 studies and excludes 1 in most."""
  gen = np.random.default_rng(9)
  covers = excludes_one = 0
  for s in range(60):
    arms_KxS = gen.lognormal(0, 0.3, (4, 7))
    arms_KxS[0] *= 3
    _, lo, hi = S.simultaneous_extremes_ratio(dict(zip("wxyz", arms_KxS)), draws=1500, seed=s)
    covers += lo <= 3 <= hi
    excludes_one += lo > 1
  assert covers / 60 >= 0.95 and excludes_one / 60 >= 0.8


def test_simultaneous_extremes_ratio_is_at_least_the_best_measured_pairs_bound():
  """B has the largest point median but is noisy; A, nearly as slow, is measured tightly:
  the largest ratio is at least A / C, whichever arm the point medians pick."""
  arms = {"A": [1.95, 2.0, 2.05, 1.98, 2.02, 1.97, 2.03], "B": [0.5, 0.7, 5.0, 2.1, 4.0, 0.6, 3.0],
          "C": [0.98, 1.0, 1.02, 0.99, 1.01, 0.97, 1.03]}
  est, lo, hi = S.simultaneous_extremes_ratio(arms)
  assert est == pytest.approx(2.1) and 1.85 < lo < 2.0 and hi > 2.1


def test_extremes_ratio_reads_censored_seeds_as_infinite():
  inf = math.inf
  assert S.bootstrap_extremes_ratio({"a": [inf] * 3, "b": [1.0, 2.0, 3.0]}, draws=200)[0] == inf
  assert S.bootstrap_extremes_ratio({"a": [inf] * 3, "b": [inf] * 3}, draws=200) == (1.0, 1.0, 1.0)
  with pytest.raises(ValueError):
    S.bootstrap_extremes_ratio({"a": [inf, 1, 2], "b": [1.0, 2.0, 3.0]}, method="bca")
  with pytest.raises(ValueError):                  # too few draws for the pairs' tails
    S.simultaneous_extremes_ratio({k: [1.0, 2.0] for k in "abcdef"}, draws=1000)


def test_extremes_ratio_bca_returns_bounds_around_a_skewed_estimate():
  arms = {"a": [1.0, 1.1, 0.9, 1.05, 0.95, 1.2, 0.8], "c": [3.0, 2.5, 3.5, 2.8, 3.2, 2.0, 4.0]}
  est, lo, hi = S.bootstrap_extremes_ratio(arms, draws=4000, method="bca")
  assert lo < est < hi and 1 < lo
  assert S.bootstrap_extremes_ratio(arms, draws=4000, method="bca") == (est, lo, hi)
