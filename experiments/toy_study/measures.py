"""The eval metrics whose definition changed with issue 18, read so that a record of either
age gives the right number or None ("not measured"), never a value under a wrong name.

- Short loss: since `hybrid-jax eval` split the answer tokens off, ``short_loss`` is the
  held-out loss over filler tokens only, ``short_answer_loss`` over answer tokens only and
  ``short_loss_all`` over every token. A record without ``short_loss_all`` predates that:
  its ``short_loss`` is the all-token mean (today's ``short_loss_all``), and its filler and
  answer losses were not measured.
- Accuracy per distance: ``retrieval_acc_by_distance/<task>/<L>/<lo>-<hi>`` (powers-of-two
  bins [lo, hi) of evidence-to-answer distance, every depth of length L pooled), with its
  example count ``retrieval_n_by_distance/...``. Bins wholly beyond every window (lo >= the
  largest window) measure far retrieval apart from position in the context.

Every function taking a record is a metric for ``study.curves`` (None: not in this record).
"""

import numpy as np

from experiments.toy_study import bootstrap as B
from experiments.toy_study import study

NOT_MEASURED = "not measured"
ACC, COUNT = "retrieval_acc_by_distance", "retrieval_n_by_distance"
TASK = "kv_recall"


def short_filler(rec) -> float | None:
  """Held-out loss over filler tokens (None in a record from before the split)."""
  return rec.get("short_loss") if "short_loss_all" in rec else None


def short_answer(rec) -> float | None:
  """Held-out loss over the answer tokens (None before the split, or with no answers)."""
  return rec.get("short_answer_loss") if "short_loss_all" in rec else None


def short_all(rec) -> float | None:
  """Held-out loss over every token: ``short_loss_all``, or an old record's ``short_loss``."""
  return rec.get("short_loss_all", rec.get("short_loss"))


SHORT = {"short loss (filler)": short_filler, "short answer loss": short_answer,
         "short loss, all tokens": short_all}


def bins_of(rec, length: int, task: str = TASK) -> list[tuple[int, int]]:
  """The distance bins (lo, hi) a record holds at ``length``, in order."""
  prefix = f"{ACC}/{task}/{length}/"
  return sorted(tuple(map(int, k[len(prefix):].split("-"))) for k in rec if k.startswith(prefix))


def count(rec, length: int, lo: int, hi: int, task: str = TASK) -> int | None:
  return rec.get(f"{COUNT}/{task}/{length}/{lo}-{hi}")


def pooled(length: int, min_lo: int = 0, only: tuple[int, int] | None = None, task: str = TASK):
  """A metric: accuracy over the bins at ``length`` with lo >= ``min_lo`` (or the one bin
  ``only``), each weighted by its example count; None when the record has none of them."""
  def metric(rec):
    bins = [only] if only else [b for b in bins_of(rec, length, task) if b[0] >= min_lo]
    acc = [rec.get(f"{ACC}/{task}/{length}/{lo}-{hi}") for lo, hi in bins]
    n = [count(rec, length, lo, hi, task) for lo, hi in bins]
    if not bins or None in acc or None in n or sum(n) == 0:
      return None
    return float(np.dot(acc, n) / sum(n))

  def examples(rec) -> int | None:
    """The examples one value rests on (the bins' counts summed)."""
    bins = [only] if only else [b for b in bins_of(rec, length, task) if b[0] >= min_lo]
    n = [count(rec, length, lo, hi, task) for lo, hi in bins]
    return None if not bins or None in n else int(sum(n))

  metric.examples = examples
  return metric


def measured(runs, metric) -> bool:
  """Whether every run's final record holds ``metric``."""
  return bool(runs) and all(r.curve and metric(r.curve[-1]) is not None for r in runs)


def examples(runs, metric) -> int | None:
  """The examples one value of a pooled-distance ``metric`` rests on: the smallest count over
  the runs' final records (the same examples for every run evaluated alike; the smallest
  can only widen an interval)."""
  ns = [metric.examples(r.curve[-1]) for r in runs if r.curve]
  return None if not ns or None in ns else min(ns)


def examples_any(runs, metric) -> int | None:
  """The examples behind one value of ``metric``: a pooled-distance metric's bin counts, else
  the eval settings' (``study.examples_of``)."""
  return examples(runs, metric) if hasattr(metric, "examples") else study.examples_of(runs, metric)


def final_values(runs, metric, last: int = 1) -> np.ndarray:
  """Per seed, the mean of the metric's last ``last`` evaluations (on the steps every run has)."""
  return study.curves(runs, metric)[1][:, -last:].mean(axis=1)


def distance_table(groups: dict, lengths, beyond: int, last: int = 1, task: str = TASK) -> str:
  """Final accuracy per distance bin at each of ``lengths``, one row per group of seeds,
  each cell the mean over seeds [95% bootstrap interval over seeds and the bin's examples,
  Binomial on its count]; a group whose records lack a bin: "not measured". Without any
  bin in any record, one sentence saying so."""
  runs = [r for rs in groups.values() for r in rs]
  cols = [(length, b) for length in lengths
          for b in sorted({b for r in runs if r.curve for b in bins_of(r.curve[-1], length, task)})]
  if not cols:
    return (f"Accuracy per distance: {NOT_MEASURED} (the stored eval records have no `{ACC}` "
            "keys: they were written before `hybrid-jax eval` measured it; a rerun of the eval "
            "fills them).")
  rows = []
  for name, rs in groups.items():
    row = [f"{name} ({len(rs)})"]
    for length, (lo, hi) in cols:
      m = pooled(length, only=(lo, hi), task=task)
      row.append(B.mean(final_values(rs, m, last), examples(rs, m)) if measured(rs, m)
                 else NOT_MEASURED)
    rows.append(row)
  header = ["accuracy per distance [95% interval]"] + [
      f"L={length} d {lo}-{hi}{' *' if lo >= beyond else ''}" for length, (lo, hi) in cols]
  counts = ", ".join(f"L={length} d {lo}-{hi}: n={_n(runs, length, lo, hi, task)}"
                     for length, (lo, hi) in cols)
  return (study.markdown_table(header, rows) + "\n\n"
          f"Distance d: tokens from the needle's last token to the answer's first, in bins "
          f"[lo, hi), every evaluated depth of a length pooled; * a bin wholly beyond every "
          f"window (lo >= {beyond}). Examples per bin (a run's final evaluation): {counts}.")


def _n(runs, length, lo, hi, task) -> str:
  ns = {count(r.curve[-1], length, lo, hi, task) for r in runs if r.curve}
  ns.discard(None)
  return "-" if not ns else str(min(ns)) if len(ns) == 1 else f"{min(ns)}-{max(ns)}"
