"""Is every committed report what the committed store makes? The CI check of experiments/:

    python -m experiments.check_reports        # exit 1 and one line per difference

For each finding it runs ``run.py --report-only`` into a temporary folder and compares every
file it makes (REPORT.md and figures) with the committed one, byte for byte; it also compares
the generated block of experiments/README.md with what experiments/calibration/run.py makes
from the store. A finding is skipped, saying so, only while the store holds no runs at all.
"""

import importlib
import sys
import tempfile
from pathlib import Path

from experiments.toy_study import store

HERE = Path(__file__).parent
FINDINGS = ("scaling", "full_attention_carries_retrieval", "large_window_laziness", "nope_on_full",
            "paper_mix")
STORES = {"paper_mix": store.PAPER_MIX}     # the others report from store.TOY_STUDY


def store_of(finding: str) -> Path:
  return STORES.get(finding, store.TOY_STUDY)


def report_differences(finding: str, data: Path | None = None, committed: Path | None = None) -> list[str]:
  """One line per file that ``--report-only`` makes differently from the committed one (or
  does not make, or that is not committed)."""
  committed = HERE / finding if committed is None else Path(committed)
  data = store_of(finding) if data is None else data
  runner = importlib.import_module(f"experiments.{finding}.run")
  with tempfile.TemporaryDirectory() as tmp:
    try:
      runner.main(["--report-only", "--store", str(data), "--out", tmp])
    except SystemExit as e:
      return [f"{finding}: --report-only failed: {e}"]
    made = {p.name: p.read_bytes() for p in Path(tmp).iterdir()}
  out = []
  for name, data_bytes in sorted(made.items()):
    path = committed / name
    if not path.exists():
      out.append(f"{finding}/{name}: made by --report-only but not committed")
    elif path.read_bytes() != data_bytes:
      out.append(f"{finding}/{name}: differs from what --report-only makes from the store")
  for path in sorted(committed.glob("*.png")) + [committed / "REPORT.md"]:
    if path.exists() and path.name not in made:
      out.append(f"{finding}/{path.name}: committed but not made by --report-only")
  return out


def calibration_differences(readme: Path = HERE / "README.md") -> list[str]:
  cal = importlib.import_module("experiments.calibration.run")
  text = readme.read_text()
  if text.count(cal.BEGIN) != 1 or text.count(cal.END) != 1:
    return [f"{readme.name}: no single generated calibration block"]
  block = text[text.index(cal.BEGIN):text.index(cal.END) + len(cal.END)]
  if block != cal.render(store.CALIBRATION, store.TOY_STUDY):
    return [f"{readme.name}: the calibration tables differ from what the store generates "
            "(python experiments/calibration/run.py --report-only rewrites them)"]
  return []


def main() -> int:
  problems = calibration_differences()
  for finding in FINDINGS:
    if store.has_runs(store_of(finding)):
      problems += report_differences(finding)
    else:
      print(f"check_reports: no runs in {store.display(store_of(finding))}: {finding}'s report "
            "awaits a rerun (skipped)")
  for line in problems:
    print(line)
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(main())
