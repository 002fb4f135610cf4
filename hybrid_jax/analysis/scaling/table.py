"""Reading a sweep's table (or the paper authors' TSV) into the points a scaling law is
fitted to: one (N, D, loss) per checkpoint, the unusable rows dropped."""

import csv
import dataclasses
import io
import math
import re
from pathlib import Path

import numpy as np

from hybrid_jax.errors import UserError

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
