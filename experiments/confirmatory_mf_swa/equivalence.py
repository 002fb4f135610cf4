"""The third part's one new statistic, frozen with its rules: equivalence of a paired
difference within +-margin (the position claims: a seed's accuracy at offset 14 minus at
offset 0, the distance fixed).

Two one-sided exact sign-flip tests, as the first set's one-sample claims use, rather than
t tests: a seed that is exact at both offsets gives a difference of 0, and a t test has no
answer when every difference is 0, which is the strongest equivalence there is. The
interval is the 90% t interval (both bounds the mean when the differences do not vary), so
``judge.decide``'s "within" rule reads it as it reads the first set's Welch interval."""

import math

import numpy as np

from experiments.confirmatory import judge as J
from experiments.toy_study import small_n as S


def paired_tost(claim, differences) -> J.Result:
  """p = the larger of the sign-flip p for mean(d) > -margin and for mean(d) < +margin."""
  d = np.array([x for x in differences if x is not None], float)
  r = J.Result(claim, n=f"{d.size}")
  if d.size < 2:
    r.note = "not measured"
    return r
  m = claim.margin
  r.effect, r.lo, r.hi = S.t_interval(d, level=0.90)
  if math.isnan(r.lo):
    r.lo = r.hi = r.effect
  zeros = np.zeros_like(d)
  p_low = S.paired_permutation_test(d + m, zeros, alternative="greater").p
  p_high = S.paired_permutation_test(d - m, zeros, alternative="less").p
  r.p = float(max(p_low, p_high))
  r.note = "interval: 90% t (the two one-sided sign-flip tests at 0.05)"
  return r
