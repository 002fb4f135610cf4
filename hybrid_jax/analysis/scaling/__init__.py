"""Scaling-law fits: the table reader (``table``), the fit and its bootstrap (``fitting``),
the figure (``figure``); the ``hybrid-jax fit-scaling`` command is
``hybrid_jax.commands.fit_scaling``. The library's
names are re-exported here, where the experiments and tests import them."""

from hybrid_jax.analysis.scaling.fitting import FORMULAS, Fit, bootstrap, fit, on_bound, scores
from hybrid_jax.analysis.scaling.table import LOSS_COLUMNS, PPL_COLUMNS, Points, TableError, read_table

__all__ = ["FORMULAS", "LOSS_COLUMNS", "PPL_COLUMNS", "Fit", "Points", "TableError", "bootstrap", "fit",
           "on_bound", "read_table", "scores"]
