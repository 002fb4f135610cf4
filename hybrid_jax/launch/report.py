"""``sweep status``: a table of runs, read only from the run directories, so it works on any
sweep, however it ran (``sweep collect`` is ``hybrid_jax.run.collect``)."""

import os
import socket
from pathlib import Path

from hybrid_jax.run import RunDir, run_dirs

# The long-context score shown by ``status``: the first of these an eval record has.
LONG_SCORE_KEYS = ("retrieval_acc", "log_longppl")


def _long_score(record: dict):
  for key in LONG_SCORE_KEYS:
    if record.get(key) is not None:
      return key, record[key]
  return None, None


def _alive(status: dict) -> bool:
  """Whether the trainer process a launcher started on this host still runs."""
  if status.get("pid") is None or status.get("host") != socket.gethostname():
    return False
  try:
    os.kill(int(status["pid"]), 0)
  except (ProcessLookupError, ValueError):
    return False
  except PermissionError:
    return True
  return True


def live_state(run: RunDir, status: dict) -> tuple[str, str | None]:
  """(state, error) as shown: a run marked running whose trainer is gone (no lock holder,
  no live starting process) is "stale", e.g. after a SIGKILL or the OOM killer."""
  state = status.get("state", "pending")
  elsewhere = status.get("host") not in (None, socket.gethostname())   # its lock is not ours to test
  if state == "running" and not elsewhere and not run.lock_held() and not _alive(status):
    return "stale", "trainer died (no process holds the run's lock); resubmit to resume"
  return state, status.get("error") if state == "failed" else None


def status_rows(root) -> list[dict]:
  rows = []
  for path in run_dirs(root):
    run = RunDir(path)
    status = run.read_status() or {}
    state, error = live_state(run, status)
    metrics = run.read_metrics()
    evals = run.read_eval()
    key, score = _long_score(evals[-1]) if evals else (None, None)
    if not status:
      error = _last_error_line(path / "train.log")
    step = status.get("step", 0)
    if state in ("running", "stale") and metrics:      # status.json lags by at most log_every
      step = max(step, metrics[-1]["step"])
    rows.append(dict(run=path.name, state=state,
                     step=step, total_steps=status.get("total_steps"),
                     tokens=metrics[-1]["tokens"] if metrics else 0,
                     loss=metrics[-1]["loss"] if metrics else None,
                     long_metric=key, long_score=score, error=error,
                     skipped=run.skipped))     # unreadable metrics/eval lines, as collect counts
  return rows


def _last_error_line(log: Path):
  if not log.exists():
    return None
  lines = [l for l in log.read_text(errors="replace").splitlines() if "error" in l.lower()]
  return lines[-1].strip() if lines else None


def status_table(root) -> str:
  rows = status_rows(root)
  if not rows:
    return f"no runs under {root}"
  head = ("run", "state", "step", "tokens", "loss", "long-context", "error")
  body = [(r["run"], r["state"], f"{r['step']}/{r['total_steps'] or '?'}", f"{r['tokens']:,}",
           "-" if r["loss"] is None else f"{r['loss']:.4f}",
           "-" if r["long_score"] is None else f"{r['long_metric']}={r['long_score']:.3f}",
           r["error"] or "") for r in rows]
  widths = [max(len(str(row[i])) for row in [head] + body) for i in range(len(head))]
  lines = ["  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip() for row in [head] + body]
  counts = {}
  for r in rows:
    counts[r["state"]] = counts.get(r["state"], 0) + 1
  skipped = sum(r["skipped"] for r in rows)
  lines.append(", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
               + (f"; {skipped} unreadable records skipped (metrics.jsonl, eval.jsonl)"
                  if skipped else ""))
  return "\n".join(lines)
