"""``sweep status``: a table of runs, read only from the run directories, so it works on any
sweep, however it ran (``sweep collect`` is ``hybrid_jax.run.collect``)."""

import json
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
    attempts = _ray_attempts(path)
    rows.append(dict(run=path.name, state=state, attempts=attempts,
                     step=step, total_steps=status.get("total_steps"),
                     tokens=metrics[-1]["tokens"] if metrics else 0,
                     loss=metrics[-1]["loss"] if metrics else None,
                     long_metric=key, long_score=score, error=error,
                     skipped=run.skipped))     # unreadable metrics/eval lines, as collect counts
  return rows


def _ray_attempts(run_dir: Path) -> str | None:
  """``2/3``: the attempts a Ray supervisor made of the run, from its ray_run.json."""
  try:
    record = json.loads((run_dir / "ray_run.json").read_text())
    return f"{record['attempts']}/{record['max_attempts']}"
  except (OSError, ValueError, KeyError, TypeError):
    return None


def _last_error_line(log: Path):
  if not log.exists():
    return None
  lines = [l for l in log.read_text(errors="replace").splitlines() if "error" in l.lower()]
  return lines[-1].strip() if lines else None


def status_table(root, ray_address: str | None = None) -> str:
  """The runs' table; runs a Ray supervisor has add its attempts and, when the cluster
  answers, what the supervisor is doing with each (``ray``), and a line when it does not."""
  rows = status_rows(root)
  if not rows:
    return f"no runs under {root}"
  view, note = {}, None
  if ray_address or any(r["attempts"] for r in rows):
    from hybrid_jax.launch.ray_backend import ray_view   # lazy: Ray only where runs used it
    view, note = ray_view(Path(root), ray_address)
  ray = any(r["attempts"] for r in rows) or bool(view)
  head = ("run", "state", "step", "tokens", "loss", "long-context") + \
      (("attempts", "ray") if ray else ()) + ("error",)
  body = [(r["run"], r["state"], f"{r['step']}/{r['total_steps'] or '?'}", f"{r['tokens']:,}",
           "-" if r["loss"] is None else f"{r['loss']:.4f}",
           "-" if r["long_score"] is None else f"{r['long_metric']}={r['long_score']:.3f}")
          + ((r["attempts"] or "-", view.get(r["run"], {}).get("phase", "-")) if ray else ())
          + (r["error"] or "",) for r in rows]
  widths = [max(len(str(row[i])) for row in [head] + body) for i in range(len(head))]
  lines = ["  ".join(str(v).ljust(w) for v, w in zip(row, widths)).rstrip() for row in [head] + body]
  counts = {}
  for r in rows:
    counts[r["state"]] = counts.get(r["state"], 0) + 1
  skipped = sum(r["skipped"] for r in rows)
  lines.append(", ".join(f"{n} {s}" for s, n in sorted(counts.items()))
               + (f"; {skipped} unreadable records skipped (metrics.jsonl, eval.jsonl)"
                  if skipped else ""))
  if note:
    lines.append(note)
  return "\n".join(lines)
