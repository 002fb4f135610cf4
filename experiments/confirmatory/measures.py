"""Per-seed values of every registered metric, from the store (eval curves and the analysis
JSONs): what ``judge`` tests. A value that is not there is None (not measured), never 0."""

import json

import numpy as np

from experiments.confirmatory import protocol as P
from experiments.confirmatory.rules import full_attention as F2, laziness as F3
from experiments.toy_study import bootstrap as B, config as T, measures as M, study

FAR = M.pooled(64, P.BEYOND)                               # far acc by distance, T = 64
FAR_START = M.pooled(64, P.BEYOND, task="kv_recall_start")  # the same, the fact at offset 0
ALL128 = study.mean_of("retrieval_acc/kv_recall/128")
CAP_SETTINGS = ("none", "full_constrained", "efficient_constrained")


def arm_runs(runs, arm) -> list:
  """The finished runs of ``arm`` (its fresh seeds only), by seed."""
  window = T.WINDOWS[arm.window] if arm.window else T.WINDOWS["medium"]
  return [r for r in study.select(runs, size="toy-xs", pattern=arm.pattern, window=window,
                                  pos_full=arm.pos_full, budget=P.BUDGET) if r.seed in arm.seeds]


def _curve(run, metric):
  pts = [(r["tokens"], metric(r)) for r in run.curve if metric(r) is not None]
  return (np.array([t for t, _ in pts], float), np.array([v for _, v in pts], float)) if pts else None


def final(run, metric):
  c = _curve(run, metric)
  return None if c is None else float(c[1][-1])


def filler_short(run):
  """The final held-out loss on filler tokens."""
  return final(run, M.short_filler)


def tokens_to(run, metric, threshold=P.THRESHOLD):
  """Tokens at the first evaluation reaching ``threshold``; +inf when none (censored)."""
  c = _curve(run, metric)
  return None if c is None else float(B.first_crossing_K(c[0], c[1], threshold))


def read_at(run, metric, budget: float):
  """The metric at the evaluation nearest ``budget`` N tokens."""
  c = _curve(run, metric)
  if c is None:
    return None
  return float(c[1][int(np.argmin(np.abs(c[0] - budget * run.n)))])


def _analysis(run, glob):
  found = sorted((run.path / "analysis").glob(glob), key=lambda p: int(p.stem.rsplit("step", 1)[1]))
  return json.loads(found[-1].read_text()) if found else None


def constrain(run, cap):
  rec = _analysis(run, f"constrain-W{cap}-beyond{P.BEYOND}-step*.json")
  return None if rec is None else {s: rec["settings"][s]["acc"] for s in CAP_SETTINGS}


def ablate(run):
  rec = _analysis(run, f"ablate-k{F2.K}-zero-beyond{P.BEYOND}-step*.json")
  return None if rec is None else dict(rec["acc"])


def probe_rise(run):
  """Probe accuracy rise through the first F layer minus the largest through an efficient one."""
  rec = _analysis(run, f"probe-C{F2.CLASSES}-beyond{P.BEYOND}-step*.json")
  if rec is None:
    return None
  acc, letters = np.asarray(rec["accuracy"], float), rec["letters"]
  first = 1 if len(acc) == len(letters) + 1 else 0
  prev = lambda p: acc[p - 1] if p > 0 else 1 / F2.CLASSES   # noqa: E731
  f_pos = [first + i for i, ch in enumerate(letters) if ch == "F"][0]
  e_pos = [first + i for i, ch in enumerate(letters) if ch != "F"]
  return float((acc[f_pos] - prev(f_pos)) - max(acc[p] - prev(p) for p in e_pos))


TRACE_FILE = f"trace-F-beyond{P.BEYOND}.json"


def trace(run):
  path = run.path / "analysis" / TRACE_FILE
  return json.loads(path.read_text()) if path.exists() else None


def _heads(tr, key):
  pts = [p for p in tr["points"] if p["tokens"] > 0]
  if not pts or any(key not in h for p in pts for h in p["heads"]):
    return None
  return (np.array([p["tokens"] for p in pts], float),
          np.array([np.mean([h[key] for h in p["heads"]]) for p in pts]))


def tokens_to_form(run):
  tr = trace(run)
  c = None if tr is None else _heads(tr, "mass")
  return None if c is None else float(B.first_crossing_K(c[0], c[1], F3.MASS_THRESHOLD))


def entropy_at(run, budget=P.READ_AT[0]):
  tr = trace(run)
  c = None if tr is None else _heads(tr, "norm_entropy")
  return None if c is None else float(c[1][int(np.argmin(np.abs(c[0] - budget * run.n)))])


def q_drift(run):
  """Tokens until the heads' W_q is within DRIFT_THRESHOLD of its final value (+inf: never)."""
  tr = trace(run)
  c = None if tr is None else _heads(tr, "q_rel_l2")
  return None if c is None else float(B.first_crossing_K(c[0], -c[1], -F3.DRIFT_THRESHOLD))


def values(runs, fn) -> list:
  """``fn`` of each run, in seed order (None where not measured)."""
  return [fn(r) for r in runs]
