"""Scaling-law fits as in the paper: L(N, D) = b N^-alpha + c D^-beta (``no_constant``) or
E + b N^-alpha + c D^-beta (``with_constant``), N = non-embedding parameters, D = tokens.

The fit is made in log space, minimising the Huber loss (delta 1e-3) of log L_hat - log L
with L-BFGS-B started from a grid of initial values (the best end point wins), alpha
bounded to [0.2, 0.3] by default. Coefficients are fitted as logs, so log L_hat is a
log-sum-exp of the terms and every term stays positive.
"""

import dataclasses
import itertools
import math

import numpy as np
from scipy.optimize import minimize
from scipy.special import huber

from hybrid_jax.analysis.scaling.table import Points, TableError

FORMULAS = ("no_constant", "with_constant")


@dataclasses.dataclass
class Fit:
  formula: str
  b: float
  alpha: float
  c: float
  beta: float
  e: float = 0.0
  objective: float = 0.0

  def predict(self, n, d):
    return self.e + self.b * np.asarray(n, float) ** -self.alpha + self.c * np.asarray(d, float) ** -self.beta

  def __str__(self):
    e = f"{self.e:.4g} + " if self.formula == "with_constant" else ""
    return f"L(N, D) = {e}{self.b:.4g} * N^-{self.alpha:.4f} + {self.c:.4g} * D^-{self.beta:.4f}"


# L-BFGS-B's defaults stop when an iteration gains less than 2.2e-9 *absolutely* (its
# relative test divides by max(|f|, 1)), and this objective is ~1e-6-1e-4 at the optimum:
# fits stopped in the valley's first flat stretch, where the floating point of the machine
# decided how far they got, and bootstrap refits started at the optimum barely moved (95%
# intervals several times too narrow). These run each start to the optimum.
_CONVERGED = dict(ftol=1e-15, gtol=1e-12, maxiter=20_000)


def fit(points: Points, *, formula: str = "no_constant", alpha_bounds=(0.2, 0.3),
        beta_bounds=(0.0, 2.0), delta: float = 1e-3, max_starts: int | None = None,
        start: "Fit | None" = None) -> Fit:
  """Minimise the Huber loss of log residuals from a grid of starting points (all of them,
  or ``max_starts`` spread evenly over the grid: a quicker, rougher search), plus ``start``
  (a previous fit's optimum: what a bootstrap refit starts from)."""
  if formula not in FORMULAS:
    raise TableError(f"--formula must be one of {FORMULAS}, got {formula!r}")
  log_n, log_d, log_y = np.log(points.n), np.log(points.d), np.log(points.y)
  with_e = formula == "with_constant"

  def objective(x):
    """Huber loss of the log residuals and its exact gradient (L-BFGS-B then needs no
    finite differences, which makes the multi-start grid affordable). Term by term, not
    stacked: a third fewer array operations, the same floating point."""
    a, b = x[0] - x[1] * log_n, x[2] - x[3] * log_d
    log_pred = np.logaddexp(a, b)                   # (scipy's logsumexp: 3x slower here)
    if with_e:
      e = np.full_like(log_n, x[4])
      log_pred = np.logaddexp(log_pred, e)
    r = log_pred - log_y
    g_r = np.clip(r, -delta, delta)                 # d huber / d r
    g_a, g_b = g_r * np.exp(a - log_pred), g_r * np.exp(b - log_pred)   # x d log_pred / d term
    grad = [g_a.sum(), -(g_a * log_n).sum(), g_b.sum(), -(g_b * log_d).sum()]
    if with_e:
      grad.append((g_r * np.exp(e - log_pred)).sum())
    return float(huber(delta, r).sum()), np.array(grad)

  bounds = [(None, None), alpha_bounds, (None, None), beta_bounds] + ([(None, None)] if with_e else [])
  grid = itertools.product(np.linspace(0, 20, 4), np.linspace(*alpha_bounds, 3),
                           np.linspace(0, 20, 4), np.linspace(max(beta_bounds[0], 0.05),
                                                              min(beta_bounds[1], 1.0), 3),
                           *([np.linspace(-1, 1.5, 3)] if with_e else []))
  grid = list(grid)
  if max_starts is not None and max_starts < len(grid):
    grid = [grid[i] for i in np.linspace(0, len(grid) - 1, max_starts).round().astype(int)]
  if start is not None:
    grid.insert(0, (math.log(start.b), start.alpha, math.log(start.c), start.beta)
                + ((math.log(max(start.e, 1e-12)),) if with_e else ()))
  best = None
  for x0 in grid:
    res = minimize(objective, np.array(x0, float), jac=True, method="L-BFGS-B", bounds=bounds,
                   options=_CONVERGED)
    if best is None or res.fun < best.fun:
      best = res
  x = best.x
  return Fit(formula, b=math.exp(x[0]), alpha=x[1], c=math.exp(x[2]), beta=x[3],
             e=math.exp(x[4]) if with_e else 0.0, objective=float(best.fun))


def on_bound(value: float, bounds, tol: float = 1e-4) -> float | None:
  """The bound ``value`` sits on (the fit was stopped there, not at a minimum), or None."""
  return next((b for b in bounds if abs(value - b) <= tol), None)


def bootstrap(points: Points, fitted: Fit, *, resamples: int = 200, seed: int = 0,
              level: float = 0.95, keep_fits: bool = False, **fit_kwargs) -> dict:
  """Percentile intervals of alpha and beta over fits to ``resamples`` resamplings of the
  points (with replacement), each refit started from ``fitted`` and a coarse grid. Returns
  {"alpha": (lo, hi), "beta": (lo, hi), "resamples": n, "level": level}; ``keep_fits`` adds
  "fits" and "draws" (each refit and its resample, as indices into ``points``), so a caller
  can take the interval of any statistic of the refits (a held-out error, say)."""
  rng = np.random.default_rng(seed)
  alphas, betas, fits, draws = [], [], [], []
  for _ in range(resamples):
    idx = rng.integers(0, len(points.y), len(points.y))
    if len(set(points.n[idx])) < 2 or len(set(points.d[idx])) < 2:
      continue                          # a resample that cannot separate N from D
    f = fit(Points(points.n[idx], points.d[idx], points.y[idx], points.label),
            formula=fitted.formula, max_starts=8, start=fitted, **fit_kwargs)
    alphas.append(f.alpha)
    betas.append(f.beta)
    if keep_fits:
      fits.append(f)
      draws.append(tuple(int(i) for i in idx))
  q = [100 * (1 - level) / 2, 100 * (1 + level) / 2]
  out = dict(alpha=tuple(float(v) for v in np.percentile(alphas, q)),
             beta=tuple(float(v) for v in np.percentile(betas, q)),
             resamples=len(alphas), level=level)
  return dict(out, fits=fits, draws=draws) if keep_fits else out


def scores(fit_: Fit, points: Points, mask=None) -> dict:
  mask = np.ones_like(points.y, bool) if mask is None else mask
  y, p = points.y[mask], fit_.predict(points.n[mask], points.d[mask])
  ss_res, ss_tot = float(np.sum((y - p) ** 2)), float(np.sum((y - y.mean()) ** 2))
  return dict(points=int(mask.sum()), r2=1 - ss_res / ss_tot if ss_tot > 0 else float("nan"),
              rmse=float(np.sqrt(np.mean((y - p) ** 2))), mae=float(np.mean(np.abs(y - p))))
