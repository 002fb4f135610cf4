"""The report of ``hybrid-jax bench train``: per shape, the project's tokens/s and its ratio to
every other side, each taken within a round (warm-up rounds left out); printed, and with
``--json`` saved with every row, from which ``--summarize`` regenerates it."""

import json
import statistics

from hybrid_jax.bench import BenchError
from hybrid_jax.run import atomic_write_text


def report(rows, breakdowns, json_path=None) -> dict:
  """Print the summary of ``rows``; with ``json_path``, also write every row and ratio there."""
  summary = summarize(rows)
  print("# summary: median over rounds of each within-round ratio")
  print(json.dumps(summary, indent=2), flush=True)
  if json_path:
    atomic_write_text(json_path, json.dumps(dict(rows=rows, breakdowns=breakdowns,
                                                 summary=summary), indent=1))
  return summary


def saved_rows(path: str) -> list[dict]:
  """The rows of a ``--json`` file; a one-line BenchError if it is not one."""
  try:
    with open(path) as f:
      rows = json.load(f)["rows"]
    if not all({"side", "shape", "round", "tokens_per_s"} <= set(r) for r in rows):
      raise ValueError("a row lacks side, shape, round or tokens_per_s")
    counted = [r for r in rows if not r.get("warmup")]
    if not counted or ({r["shape"] for r in counted}
                       != {r["shape"] for r in counted if r["side"] == "project"}):
      raise ValueError("no counted rows, or a shape without a counted project row")
  except (OSError, ValueError, KeyError, TypeError) as e:
    raise BenchError(f"--summarize {path}: not a bench train --json file ({e})") from None
  return rows


def summarize(rows) -> dict:
  """Per shape: the project's median tokens/s and, per other side, the median, lower quartile
  and range over rounds of project tokens/s over that side's (measured in the same round);
  warm-up rounds left out."""
  rows = [r for r in rows if not r.get("warmup")]
  out = {}
  for shape in dict.fromkeys(r["shape"] for r in rows):
    mine = [r for r in rows if r["shape"] == shape]
    proj = {r["round"]: r["tokens_per_s"] for r in mine if r["side"] == "project"}
    entry = dict(project_tokens_per_s=round(statistics.median(list(proj.values()))))
    for side in dict.fromkeys(r["side"] for r in mine if r["side"] != "project"):
      ratios = [proj[r["round"]] / r["tokens_per_s"] for r in mine
                if r["side"] == side and r["round"] in proj]
      entry[f"{side}_tokens_per_s"] = round(statistics.median(
          [r["tokens_per_s"] for r in mine if r["side"] == side]))
      entry[f"project_over_{side}"] = round(statistics.median(ratios), 3)
      entry[f"project_over_{side}_lower_quartile"] = round(
          statistics.quantiles(ratios, n=4)[0] if len(ratios) > 1 else ratios[0], 3)
      entry[f"project_over_{side}_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
    out[shape] = entry
  return out
