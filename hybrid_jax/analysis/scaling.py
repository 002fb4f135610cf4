"""Scaling-law fits as in the paper: L(N, D) = b N^-alpha + c D^-beta (``no_constant``) or
E + b N^-alpha + c D^-beta (``with_constant``), N = non-embedding parameters, D = tokens.

The fit is made in log space, minimising the Huber loss (delta 1e-3) of log L_hat - log L
with L-BFGS-B started from a grid of initial values (the best end point wins), alpha
bounded to [0.2, 0.3] by default. Coefficients are fitted as logs, so log L_hat is a
log-sum-exp of the terms and every term stays positive.
"""

import csv
import dataclasses
import io
import itertools
import json
import math
import os
import re
from pathlib import Path

import numpy as np
from scipy.optimize import minimize
from scipy.special import huber

from hybrid_jax.cli_args import ArgumentParser
from hybrid_jax.errors import UserError

FORMULAS = ("no_constant", "with_constant")
LOSS_COLUMNS = ("loss", "short_loss", "heldout_loss", "train_loss")


class TableError(UserError, ValueError):
  """A table that cannot be fitted; the message is one line."""


@dataclasses.dataclass
class Points:
  n: np.ndarray       # non-embedding parameters
  d: np.ndarray       # training tokens
  y: np.ndarray       # the fitted quantity (loss, or log PPL)
  label: str


def _parse_multiplier(text: str) -> float:
  m = re.fullmatch(r"\s*([0-9.eE+-]+)\s*[nN]?\s*", text)
  if not m:
    raise ValueError(text)
  return float(m.group(1))


PPL_COLUMNS = ("longppl", "loss")     # the authors' LongPPL table keeps the PPL in ``loss``


def read_table(path, *, column: str | None = None, longppl: bool = False,
               ppl_column: str | None = None) -> Points:
  """Points from a collected sweep table (columns ``n``, ``tokens``, a loss column) or the
  paper authors' TSV (``model_size``, ``token_multiplier`` written like ``200.110938n``,
  ``n``, ``loss``: D = multiplier x n). ``longppl``: fit log of a perplexity column
  (``ppl_column``, default the first of ``PPL_COLUMNS`` present: the authors' own
  ``swa128_longppl.tsv`` ships its PPL under ``loss``)."""
  path = Path(path)
  if not path.is_file():
    raise TableError(f"table {path} does not exist")
  text = path.read_text()
  if not text.strip():
    raise TableError(f"table {path} is empty")
  delimiter = "\t" if text.splitlines()[0].count("\t") >= text.splitlines()[0].count(",") else ","
  rows = list(csv.DictReader(io.StringIO(text), delimiter=delimiter))
  if not rows:
    raise TableError(f"table {path} has a header but no rows")
  cols = rows[0].keys()
  if longppl:
    column = column or ppl_column or next((c for c in PPL_COLUMNS if c in cols), PPL_COLUMNS[0])
  else:
    column = column or next((c for c in LOSS_COLUMNS if c in cols), None)
  if column is None or column not in cols:
    raise TableError(f"table {path}: no column {column or ' / '.join(LOSS_COLUMNS)!r} "
                     f"(columns: {', '.join(cols)})")
  if "n" not in cols or not ({"tokens", "token_multiplier"} & set(cols)):
    raise TableError(f"table {path}: needs columns n and tokens (or token_multiplier)")
  points = {}           # (n, D) -> y: a checkpoint evaluated under several settings counts once
  for i, r in enumerate(rows, start=2):
    try:
      if not r[column] or not r["n"]:
        continue                          # a checkpoint without this metric
      ni = float(r["n"])
      di = float(r["tokens"]) if r.get("tokens") else _parse_multiplier(r["token_multiplier"]) * ni
      yi = float(r[column])
    except (ValueError, TypeError):
      raise TableError(f"table {path} line {i}: cannot read n / tokens / {column}") from None
    if di <= 0 or ni <= 0 or not math.isfinite(yi) or yi <= 0:
      continue                             # step 0 or a diverged point: nothing to fit
    points[(ni, di)] = math.log(yi) if longppl else yi
  if len(points) < 3:
    raise TableError(f"table {path}: {len(points)} usable points; a fit needs at least 3")
  (n, d), y = zip(*points.keys()), list(points.values())
  return Points(np.array(n), np.array(d), np.array(y),
                f"log({column})" if longppl else column)


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
              level: float = 0.95, **fit_kwargs) -> dict:
  """Percentile intervals of alpha and beta over fits to ``resamples`` resamplings of the
  points (with replacement), each refit started from ``fitted`` and a coarse grid. Returns
  {"alpha": (lo, hi), "beta": (lo, hi), "resamples": n, "level": level}."""
  rng = np.random.default_rng(seed)
  alphas, betas = [], []
  for _ in range(resamples):
    idx = rng.integers(0, len(points.y), len(points.y))
    if len(set(points.n[idx])) < 2 or len(set(points.d[idx])) < 2:
      continue                          # a resample that cannot separate N from D
    f = fit(Points(points.n[idx], points.d[idx], points.y[idx], points.label),
            formula=fitted.formula, max_starts=8, start=fitted, **fit_kwargs)
    alphas.append(f.alpha)
    betas.append(f.beta)
  q = [100 * (1 - level) / 2, 100 * (1 + level) / 2]
  return dict(alpha=tuple(float(v) for v in np.percentile(alphas, q)),
              beta=tuple(float(v) for v in np.percentile(betas, q)),
              resamples=len(alphas), level=level)


def scores(fit_: Fit, points: Points, mask=None) -> dict:
  mask = np.ones_like(points.y, bool) if mask is None else mask
  y, p = points.y[mask], fit_.predict(points.n[mask], points.d[mask])
  ss_res, ss_tot = float(np.sum((y - p) ** 2)), float(np.sum((y - y.mean()) ** 2))
  return dict(points=int(mask.sum()), r2=1 - ss_res / ss_tot if ss_tot > 0 else float("nan"),
              rmse=float(np.sqrt(np.mean((y - p) ** 2))), mae=float(np.mean(np.abs(y - p))))


def plot(fit_: Fit, points: Points, out: Path, held_out_n=None):
  import matplotlib   # lazy: matplotlib costs ~0.7 s at import; only figure writers need it
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt   # lazy: matplotlib costs ~0.7 s at import; only figure writers need it
  fig, ax = plt.subplots(figsize=(6.4, 4.4))
  sizes = sorted(set(points.n))
  colors = plt.cm.viridis(np.linspace(0, 0.9, len(sizes)))
  for n, color in zip(sizes, colors):
    m = points.n == n
    held = held_out_n is not None and n == held_out_n
    ax.scatter(points.d[m], points.y[m], color=color, s=18, marker="x" if held else "o",
               label=f"N = {n / 1e6:.3g}M" + (" (held out)" if held else ""))
    d = np.geomspace(points.d[m].min(), points.d[m].max(), 100)
    ax.plot(d, fit_.predict(n, d), color=color, lw=1.2, ls="--" if held else "-")
  ax.set(xscale="log", xlabel="training tokens D", ylabel=points.label,
         title=f"fit: {fit_}".replace("L(N, D) = ", ""))
  ax.title.set_fontsize(8)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  out.parent.mkdir(parents=True, exist_ok=True)
  tmp = out.with_name(f".{out.name}.tmp{os.getpid()}{out.suffix}")
  fig.savefig(tmp, dpi=120)
  plt.close(fig)
  tmp.replace(out)
  return out


def main(argv):

  p = ArgumentParser(prog="hybrid-jax fit-scaling", description="Fit a scaling law L(N, D) to a "
                     "collected table.", epilog=__doc__)
  p.add_argument("table", help="a collected sweep table (CSV/TSV) or the paper authors' TSV")
  p.add_argument("--formula", choices=FORMULAS, default="no_constant",
                 help="b N^-alpha + c D^-beta, or with a constant E added (see below)")
  p.add_argument("--longppl", action="store_true", help="fit log(PPL) of --ppl-column")
  p.add_argument("--ppl-column", default=None,
                 help="the PPL column (default: the first of %s present)" % (PPL_COLUMNS,))
  p.add_argument("--bootstrap", type=int, default=200,
                 help="resamples for the 95%% intervals of alpha and beta (0: none)")
  p.add_argument("--column", default=None, help="the loss column (default: first of %s)" % (LOSS_COLUMNS,))
  p.add_argument("--validate", action="store_true", help="hold out the largest model; report R^2, RMSE, MAE")
  p.add_argument("--alpha-bounds", default="0.2,0.3", metavar="LO,HI",
                 help="the range alpha is fitted in")
  p.add_argument("--beta-bounds", default="0.0,2.0", metavar="LO,HI",
                 help="the range beta is fitted in")
  p.add_argument("--out", default=None, help="figure path (default: next to the table)")
  a = p.parse_args(argv)
  try:
    alpha_bounds = tuple(float(x) for x in a.alpha_bounds.split(","))
    beta_bounds = tuple(float(x) for x in a.beta_bounds.split(","))
    if len(alpha_bounds) != 2 or len(beta_bounds) != 2 or alpha_bounds[0] > alpha_bounds[1] \
        or beta_bounds[0] > beta_bounds[1]:
      raise ValueError
  except ValueError:
    raise TableError("--alpha-bounds/--beta-bounds take LO,HI") from None
  try:
    points = read_table(a.table, column=a.column, longppl=a.longppl, ppl_column=a.ppl_column)
    train_mask, held_n = np.ones_like(points.y, bool), None
    if a.validate:
      held_n = points.n.max()
      train_mask = points.n != held_n
      if len(set(points.n[train_mask])) < 2:
        raise TableError("--validate needs at least 3 model sizes (2 to fit, the largest held out)")
    fitted = fit(Points(points.n[train_mask], points.d[train_mask], points.y[train_mask], points.label),
                 formula=a.formula, alpha_bounds=alpha_bounds, beta_bounds=beta_bounds)
  except TableError:
    raise
  if a.bootstrap < 0:
    raise TableError(f"--bootstrap must be >= 0 (got {a.bootstrap})")
  result = dict(fit=str(fitted), **dataclasses.asdict(fitted),
                train=scores(fitted, points, train_mask),
                alpha_on_bound=on_bound(fitted.alpha, alpha_bounds),
                beta_on_bound=on_bound(fitted.beta, beta_bounds))
  if a.bootstrap:
    result["bootstrap"] = bootstrap(
        Points(points.n[train_mask], points.d[train_mask], points.y[train_mask], points.label),
        fitted, resamples=a.bootstrap, alpha_bounds=alpha_bounds, beta_bounds=beta_bounds)
  if a.validate:
    result["held_out"] = dict(n=float(held_n), **scores(fitted, points, ~train_mask))
  out = Path(a.out) if a.out else Path(a.table).with_suffix(".fit.png")
  plot(fitted, points, out, held_n)
  print(f"{points.label}: {fitted}")
  for name in ("alpha", "beta"):
    value, bound = getattr(fitted, name), result[f"{name}_on_bound"]
    ci = result.get("bootstrap", {}).get(name)
    print(f"  {name} = {value:.4f}" + (f"  95% bootstrap interval [{ci[0]:.4f}, {ci[1]:.4f}] "
                                        f"({result['bootstrap']['resamples']} resamples)" if ci else "")
          + (f"  ON ITS BOUND {bound:g}: the fit stopped at the bound, not at a minimum; "
             f"widen --{name}-bounds to see where it would go" if bound is not None else ""))
  for k in ("train", "held_out"):
    if k in result:
      s = result[k]
      print(f"  {k:8s} points={s['points']} R^2={s['r2']:.4f} RMSE={s['rmse']:.4g} MAE={s['mae']:.4g}")
  print(f"  figure: {out}")
  print(json.dumps(result))
  return 0
