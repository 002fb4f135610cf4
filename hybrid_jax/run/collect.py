"""Runs as rows: one per (run, evaluated checkpoint), with the sweep point, N and every
metric; ``sweep collect`` writes them as CSV and the scaling plots and fits read them."""

import csv
import io
import json
import sys
from pathlib import Path

from hybrid_jax.errors import UserError
from hybrid_jax.run.files import UnwritableError, atomic_write_text
from hybrid_jax.run.rundir import RunDir

LAUNCH_FILE = "launch.json"


def run_dirs(root) -> list[Path]:
  """Run directories under ``root`` (those with a config.json or launch.json), sorted; a
  run directory itself is returned alone."""
  root = Path(root)
  if (root / "config.json").exists() or (root / LAUNCH_FILE).exists():
    return [root]
  return sorted(p for p in root.iterdir()
                if p.is_dir() and ((p / "config.json").exists() or (p / LAUNCH_FILE).exists()))


def flat_record(prefix: str, d: dict) -> dict:
  out = {}
  for k, v in d.items():
    if isinstance(v, dict):
      out.update(flat_record(f"{prefix}{k}.", v))
    else:
      out[f"{prefix}{k}"] = v
  return out


def collect_rows(root, with_skipped: bool = False):
  """One row per (run, evaluated checkpoint), or per logged step for runs never evaluated:
  the sweep point, model size and N, tokens and tokens/N, the training loss at that step,
  and every eval metric. ``with_skipped``: (rows, records skipped as unreadable)."""
  rows, skipped = [], 0
  for path in run_dirs(root):
    run = RunDir(path)
    if not run.config_path.exists():
      continue
    try:
      cfg = json.loads(run.config_path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
      print(f"hybrid-jax: warning: {run.config_path} is not valid JSON; run skipped", file=sys.stderr)
      continue
    point = json.loads((path / LAUNCH_FILE).read_text()).get("point", {}) \
        if (path / LAUNCH_FILE).exists() else {}
    n = cfg["derived"]["non_embedding_params"]
    base = dict(run=path.name, model_size=cfg["model"]["size"], pattern=cfg["model"]["pattern"],
                window=cfg["model"]["window"], pos_full=cfg["model"]["pos_full"],
                seed=cfg["train"]["seed"], n=n, **{f"point.{k}": v for k, v in point.items()})
    loss_at = {r["step"]: r["loss"] for r in run.read_metrics()}
    records = run.read_eval()
    if not records:
      records = [dict(step=r["step"], tokens=r["tokens"]) for r in run.read_metrics()]
    for rec in records:
      row = dict(base, step=rec["step"], tokens=rec["tokens"],
                 token_multiplier=rec["tokens"] / n, train_loss=loss_at.get(rec["step"]))
      row.update({k: v for k, v in flat_record("", rec).items() if k not in ("step", "tokens")})
      rows.append(row)
    skipped += run.skipped
  return (rows, skipped) if with_skipped else rows


def rows_csv(rows, delimiter: str = ",") -> str:
  columns = list(dict.fromkeys(k for r in rows for k in r))
  out = io.StringIO()
  writer = csv.DictWriter(out, fieldnames=columns, delimiter=delimiter)
  writer.writeheader()
  for r in rows:
    writer.writerow(r)
  return out.getvalue()


def write_rows(rows, out, *, default_out: bool):
  """Write ``rows`` to ``out`` (TSV for a .tsv name, else CSV). A sweep root is often
  read-only (an archive, another user's results): with the default path inside it
  (``default_out``) the one-line error says to pass ``--out FILE``."""
  out = Path(out)
  try:
    atomic_write_text(out, rows_csv(rows, delimiter="\t" if out.suffix == ".tsv" else ","))
  except UnwritableError as e:
    if not default_out:
      raise
    raise UserError(f"cannot write {out}: {e.reason}; pass --out FILE to write the table "
                    "elsewhere") from None
