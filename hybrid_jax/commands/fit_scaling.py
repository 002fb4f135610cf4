"""``hybrid-jax fit-scaling``: fit a law to a table, print it with its intervals and scores
(and as one JSON line), and draw the figure."""

import dataclasses
import json
from pathlib import Path

import numpy as np

from hybrid_jax.analysis.scaling import fitting
from hybrid_jax.analysis.scaling.figure import plot
from hybrid_jax.analysis.scaling.fitting import FORMULAS, bootstrap, fit, on_bound, scores
from hybrid_jax.analysis.scaling.table import LOSS_COLUMNS, PPL_COLUMNS, Points, TableError, read_table
from hybrid_jax.cli_args import ArgumentParser


def main(argv):

  p = ArgumentParser(prog="hybrid-jax fit-scaling", description="Fit a scaling law L(N, D) to a "
                     "collected table.", epilog=fitting.__doc__)
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
