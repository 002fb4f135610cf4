"""The scaling report's fit claim (issue 47): judged on the interval of fit-scaling's own
bootstrap (``hybrid_jax.analysis.scaling.bootstrap``), not on a point value; the point-value
verdict it replaced stays in the report, labelled superseded, with its result."""

import re
import types
from pathlib import Path

import numpy as np
import pytest

from experiments.scaling import run as R
from hybrid_jax.analysis import scaling as S

REPORT = Path(__file__).parents[1] / "experiments" / "scaling" / "REPORT.md"
ESTIMATE = re.compile(r"^(-?[\d.]+)% \[(-?[\d.]+)%, (-?[\d.]+)%\]$")


def _row(text: str, key: str) -> list[str]:
  line = next(line for line in text.splitlines() if line.startswith(f"| {key} |"))
  return [c.strip() for c in line.strip("|").split("|")]


def test_the_committed_report_judges_the_fit_on_an_interval_and_keeps_the_point_verdict():
  report = REPORT.read_text()
  verdicts = report.split("## Verdicts")[1].split("## Changed metrics")[0]
  fit = _row(verdicts, "fit")
  point, lo, hi = (float(x) for x in ESTIMATE.match(fit[2]).groups())
  assert lo < hi, f"the fit claim's interval is a point again: {fit[2]}"
  assert "fit-scaling's bootstrap" in fit[1]
  assert re.search(r"- fit \([a-z ]+\): Worst architecture: .* Interval: fit-scaling's bootstrap, "
                   r"\d+ resamples of 200", verdicts)
  changed = report.split("## Changed metrics")[1]
  assert "**fit interval**" in changed
  # the verdict as first judged, on the point value: kept, with its result
  assert _row(changed, "fit, point value (superseded)")[1:] == [
      "7.8% [7.8%, 7.8%]", "effect < 5", "**not reproduced**"]
  # the old all-token metric, kept as it was first judged
  assert _row(changed, "as fit, on the short loss over every token (the old `short_loss`)")[1:] == [
      "7.3% [7.3%, 7.3%]", "effect < 5", "**not reproduced**"]
  # the fit table's exponents carry the library's intervals
  table = report.split("## Scaling-law fit")[1].split("## Verdicts")[0]
  assert "| architecture | alpha [95% bootstrap] | beta [95% bootstrap] |" in table
  assert re.search(r"\| SF w=16 \| [\d.]+ \[[\d.]+, [\d.]+\] \| [\d.]+ \[[\d.]+, [\d.]+\] \|", table)


def _cells(archs: dict, noise: float) -> dict:
  """{(architecture, size, budget): [a run]} of three sizes x four budgets whose final
  short loss follows ``archs[a]`` = (b, alpha, c, beta), times log-normal noise."""
  gen = np.random.default_rng(1)
  cells = {}
  for a, (b, alpha, c, beta) in archs.items():
    for size, n in (("toy-3xs", 2.5e4), ("toy-2xs", 1e5), ("toy-xs", 2e5)):
      for budget in (3.75, 7.5, 15, 30):
        d = budget * n
        y = (b * n ** -alpha + c * d ** -beta) * float(np.exp(noise * gen.standard_normal()))
        cells[(a, size, budget)] = [types.SimpleNamespace(
            n=n, curve=[dict(tokens=d, short_loss=y)])]
  return cells


def test_the_fit_claims_interval_is_fit_scalings_bootstrap_with_the_worst_picked_per_resample(monkeypatch):
  monkeypatch.setattr(R, "FIT_STARTS", 4)
  monkeypatch.setattr(R, "FIT_RESAMPLES", 12)
  calls, library = [], S.bootstrap
  monkeypatch.setattr(S, "bootstrap", lambda *a, **k: calls.append(k) or library(*a, **k))
  cells = _cells({"A": (12.0, 0.15, 60.0, 0.28), "B": (10.0, 0.12, 80.0, 0.3)}, noise=0.02)
  fits = R.fit_laws(None, cells, lambda rec: rec["short_loss"])
  assert [(k["resamples"], k["keep_fits"]) for k in calls] == [(12, True)] * 2   # the library's bootstrap
  boots = [boot for *_, boot in fits]
  assert all(len(b["mae_pct"]) == len(b["draws"]) == b["resamples"] for b in boots)
  assert boots[0]["draws"] == boots[1]["draws"]            # the same resampled cells for both
  assert all("[" in row[1] and "[" in row[2] for row, *_ in fits)   # alpha, beta with intervals
  j = R._fit_judged(R.CLAIMS[2], fits, "filler tokens")
  assert j.interval.lo < j.interval.hi                     # an interval, not a point
  assert j.interval.point == pytest.approx(max(b["point"] for b in boots))
  worst_B = np.max([b["mae_pct"] for b in boots], axis=0)  # the pick of the worst, per resample
  assert (j.interval.lo, j.interval.hi) == tuple(np.percentile(worst_B, [2.5, 97.5]))
  old = R._point_fit_judged(R.POINT_FIT, fits, "filler tokens")
  assert old.interval.lo == old.interval.hi == old.interval.point   # what it superseded


def test_the_librarys_bootstrap_returns_its_refits_only_when_asked():
  gen = np.random.default_rng(0)
  n = np.repeat([1e5, 3e5, 1e6], 3)
  d = n * np.tile([5.0, 10.0, 20.0], 3)
  y = (12.0 * n ** -0.2 + 60.0 * d ** -0.3) * np.exp(0.02 * gen.standard_normal(n.size))
  pts = S.Points(n, d, y, "loss")
  fitted = S.fit(pts, max_starts=4)
  plain = S.bootstrap(pts, fitted, resamples=6)
  kept = S.bootstrap(pts, fitted, resamples=6, keep_fits=True)
  assert "fits" not in plain and {k: kept[k] for k in plain} == plain   # same draws, same intervals
  assert len(kept["fits"]) == len(kept["draws"]) == kept["resamples"]
  for f, idx in zip(kept["fits"], kept["draws"]):      # each refit is the fit of its resample
    again = S.fit(S.Points(n[list(idx)], d[list(idx)], y[list(idx)], "loss"), formula=fitted.formula,
                  max_starts=8, start=fitted)
    assert again.alpha == pytest.approx(f.alpha) and again.beta == pytest.approx(f.beta)
