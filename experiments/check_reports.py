"""Is every committed report what the committed store makes? The CI check of experiments/:

    python -m experiments.check_reports            # exit 1 and one line per difference
    python -m experiments.check_reports --exact    # any byte difference is one

For each finding it runs ``--report-only`` into a temporary folder and compares every file it
makes (REPORT.md and figures) with the committed one; it also compares the generated blocks of
experiments/README.md (the calibration tables, the store's state) with what the store makes,
byte for byte. A finding is skipped, saying so, only while the store holds no runs at all.

A report equals its committed file byte for byte where numpy, scipy and matplotlib compute as
where it was made (the committed files: an x86 core with AVX-512; ``--exact`` holds the check
to that). Elsewhere exactly two differences are accepted, each named in a line of its own
(``ROUNDED``): text whose numbers lie within one unit of their last printed digit, the rest
identical (each number with as many decimals), and a PNG of the same size whose pixels'
channels differ by at most ``PIXEL_SHADE``. The fits are why: their Huber objective is flat
near the optimum, so an x86 core without AVX-512 (numpy's exp and log round differently
there) ends a fit one unit away in the fourth digit of a held-out error, and its curve a
fraction of a pixel away. A matplotlib that draws differently fails even so: regenerate.
"""

import argparse
import importlib
import io
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

from experiments.toy_study import store

HERE = Path(__file__).parent
FINDINGS = ("scaling", "full_attention_carries_retrieval", "large_window_laziness", "nope_on_full",
            "paper_mix", "confirmatory", "confirmatory_retrieving", "confirmatory_mf_swa")
STORES = {"paper_mix": store.PAPER_MIX,     # the others report from store.TOY_STUDY
          "confirmatory": store.CONFIRMATORY,
          "confirmatory_retrieving": store.CONFIRMATORY_RETRIEVING,
          "confirmatory_mf_swa": store.CONFIRMATORY_MF_SWA}

# The confirmatory report prints the commits of its rules and data, which a shallow clone
# does not hold: there those lines are left out of the comparison, and the check says so.
_COMMIT_LINE = re.compile(rb"^- (`[^`]+`|data `[^`]+`): ([0-9a-f]{12}|uncommitted|not yet committed)$",
                          re.MULTILINE)
SHALLOW = "compared without its commit lines (a shallow clone holds no history)"


def without_commits(text: bytes) -> bytes:
  return _COMMIT_LINE.sub(rb"- \1: (commit)", text)


def _commits_unknown(finding: str) -> bool:
  if finding not in ("confirmatory", "confirmatory_retrieving", "confirmatory_mf_swa"):
    return False
  from experiments.confirmatory import ancestry
  return ancestry.shallow()


def store_of(finding: str) -> Path:
  return STORES.get(finding, store.TOY_STUDY)


_NUMBER = re.compile(r"-?\d+(?:\.(\d+))?(?:[eE][-+]?\d+)?")
# The most a pixel's channel may differ (on a 0-1 scale) and still be an anti-aliasing shade
# of a line moved by a fraction of a pixel; anything drawn differently differs by far more.
PIXEL_SHADE = 16 / 255


def same_text(committed: str, made: str) -> bool:
  """The same text, or the same up to numbers within one unit of their last printed digit."""
  if committed == made:
    return True
  if _NUMBER.split(committed)[::2] != _NUMBER.split(made)[::2]:
    return False
  a, b = list(_NUMBER.finditer(committed)), list(_NUMBER.finditer(made))
  if len(a) != len(b):
    return False
  for x, y in zip(a, b):
    if x.group() == y.group():
      continue
    if x.group(1) is None or y.group(1) is None or len(x.group(1)) != len(y.group(1)):
      return False                       # an integer, or a different number of decimals
    unit = 10.0 ** -len(x.group(1))
    if abs(float(x.group()) - float(y.group())) > 1.5 * unit:
      return False
  return True


def same_figure(committed: bytes, made: bytes) -> bool:
  """The same PNG bytes, or the same size with no pixel further apart than ``PIXEL_SHADE``."""
  if committed == made:
    return True
  import matplotlib.image   # lazy, as the figure writers import it
  try:
    a, b = (matplotlib.image.imread(io.BytesIO(x), format="png") for x in (committed, made))
  except Exception:                      # a damaged file is a difference, not a crash
    return False
  return a.shape == b.shape and float(np.abs(a - b).max()) <= PIXEL_SHADE


def _same(name: str, committed: bytes, made: bytes) -> bool:
  if name.endswith(".png"):
    return same_figure(committed, made)
  try:
    return same_text(committed.decode(), made.decode())
  except UnicodeDecodeError:
    return committed == made


ROUNDED = "equal within another CPU's rounding, not byte for byte"


def report_differences(finding: str, data: Path | None = None, committed: Path | None = None,
                       *, exact: bool = False, rounded: list | None = None) -> list[str]:
  """One line per file that ``--report-only`` makes differently from the committed one (or
  does not make, or that is not committed). A file equal only within rounding is a line in
  ``rounded`` (when given), or with ``exact`` a difference."""
  committed = HERE / finding if committed is None else Path(committed)
  data = store_of(finding) if data is None else data
  runner = importlib.import_module(f"experiments.{finding}.run")
  with tempfile.TemporaryDirectory() as tmp:
    try:
      runner.main(["--report-only", "--store", str(data), "--out", tmp])
    except SystemExit as e:
      return [f"{finding}: --report-only failed: {e}"]
    made = {p.name: p.read_bytes() for p in Path(tmp).iterdir()}
  out, shallow = [], _commits_unknown(finding)
  for name, data_bytes in sorted(made.items()):
    path = committed / name
    if not path.exists():
      out.append(f"{finding}/{name}: made by --report-only but not committed")
      continue
    committed_bytes = path.read_bytes()
    if shallow and name == "REPORT.md":
      committed_bytes, data_bytes = without_commits(committed_bytes), without_commits(data_bytes)
      if rounded is not None:
        rounded.append(f"{finding}/{name}: {SHALLOW}")
    if committed_bytes == data_bytes:
      continue
    elif not exact and _same(name, committed_bytes, data_bytes):
      if rounded is not None:
        rounded.append(f"{finding}/{name}: {ROUNDED}")
    else:
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
            "(python -m experiments.calibration.run --report-only rewrites them)"]
  return []


def main(argv=None) -> int:
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--exact", action="store_true",
                 help="fail on any byte difference, rounding included (where the reports were made)")
  exact = p.parse_args(argv).exact
  problems, rounded = calibration_differences() + store.state_differences(), []
  for finding in FINDINGS:
    if store.has_runs(store_of(finding)):
      problems += report_differences(finding, exact=exact, rounded=rounded)
    else:
      print(f"check_reports: no runs in {store.display(store_of(finding))}: {finding}'s report "
            "awaits a rerun (skipped)")
  for line in rounded + problems:
    print(line)
  return 1 if problems else 0


if __name__ == "__main__":
  sys.exit(main())
