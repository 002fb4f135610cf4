"""``hybrid-jax sweep submit``: plan a grid, check it whole, then train what is not done.

Everything that can be wrong with a sweep (the file, an unknown key, a broken rule, a run
directory holding another config) is found before the first run starts. Submitting again
skips finished runs and resumes the rest from their checkpoints; each run's lock makes a
second launcher (or a second shell) wait instead of training a run twice.
"""

import json
from pathlib import Path

from hybrid_jax.launch import grid, run_root
from hybrid_jax.launch.grid import SweepError
from hybrid_jax.launch.local import default_parallel, run_local
from hybrid_jax.launch.slurm import run_slurm
from hybrid_jax.model.flops import model_flops_per_token
from hybrid_jax.run import LAUNCH_FILE, RunDir, atomic_write_text, config_diff


def dry_run_table(runs) -> str:
  rows = [("run", "pattern", "window", "size", "N (non-emb)", "steps", "tokens", "tokens/N", "FLOPs")]
  total = 0.0
  for r in runs:
    if r.error:
      rows.append((r.name, "invalid: " + r.error) + ("",) * 7)
      continue
    c, d = r.resolved, r.resolved.derived
    flops = model_flops_per_token(c) * d.tokens
    total += flops
    rows.append((r.name, c.model.pattern, str(c.model.window), c.model.size,
                 f"{d.non_embedding_params:,}", str(d.steps), f"{d.tokens:,}",
                 f"{d.tokens / d.non_embedding_params:.1f}", f"{flops:.3g}"))
  widths = [max(len(row[i]) for row in rows if not row[1].startswith("invalid")) for i in range(len(rows[0]))]
  lines = ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
  valid = [r for r in runs if not r.error]
  lines.append(f"{len(valid)} runs, {sum(r.resolved.derived.tokens for r in valid):,} tokens, "
               f"{total:.3g} FLOPs in all" + (f"; {len(runs) - len(valid)} invalid" if len(valid) < len(runs) else ""))
  return "\n".join(lines)


def prepare(root: Path, runs, *, retry_failed: bool = False, log=print) -> list[Path]:
  """Check every existing run directory against its planned config, then write each
  pending run's launch.json; returns the run directories to train."""
  for r in runs:
    config_path = RunDir(root / r.name).config_path
    if config_path.exists() and r.error:
      raise SweepError(f"run {r.name}: {r.error}; its directory holds an earlier run, left untouched")
    if config_path.exists():
      try:
        old = json.loads(config_path.read_text())
      except json.JSONDecodeError:
        raise SweepError(f"run {r.name}: {config_path} is not valid JSON") from None
      diff = config_diff(old, json.loads(r.resolved.to_json()))
      if diff:
        raise SweepError(f"run {r.name} in {root} holds another config ({'; '.join(diff[:3])}); "
                         "use a new --root")
  pending = []
  for r in runs:
    run = RunDir(root / r.name)
    status = run.read_status() or {}
    started = run.config_path.exists()
    if status.get("state") == "done":
      log(f"done     {r.name}: skipped")
      continue
    if status.get("state") == "failed" and started and not retry_failed:
      log(f"failed   {r.name}: skipped ({status.get('error')}); --retry-failed reruns it")
      continue
    run.path.mkdir(parents=True, exist_ok=True)
    atomic_write_text(run.path / LAUNCH_FILE, json.dumps(
        dict(point=r.point, config=r.config.to_dict()), indent=2, sort_keys=True) + "\n")
    if r.error:          # never started (checked above): record why it cannot run
      run.write_status("failed", 0, 0, f"invalid config: {r.error}")
      log(f"failed   {r.name}: invalid config: {r.error}")
      continue
    pending.append(run.path)
  return pending


def submit(sweep_file, root, *, backend="local", parallel=None, dry_run=False, overrides=None,
           retry_failed=False, slurm=None, wait=False, ray=None, plan=None, ray_address="auto",
           max_attempts=3, log=print) -> dict:
  sweep = grid.load_sweep(sweep_file)
  runs = grid.plan(sweep, overrides)
  if dry_run:
    print(dry_run_table(runs), flush=True)
    return {}
  if runs and all(r.error for r in runs):   # one rule broken everywhere: say it, create nothing
    others = len({r.error for r in runs}) - 1
    raise SweepError(f"every grid point is invalid ({len(runs)} of {len(runs)}): {runs[0].error}"
                     + (f" (and {others} other errors; --dry-run lists them)" if others else ""))
  root = run_root.check(root)
  if backend == "ray":      # every run's request checked (and Ray found) before anything is written
    from hybrid_jax.launch import ray_backend, ray_request
    ray_backend.import_ray()
    requests = ray_request.requests(
        [r.name for r in runs if not r.error], ray_request.parse_options(ray or [], sweep.ray),
        [ray_request.read_plan(p) for p in plan or []], log=log)
    ray_backend.connect(ray_address)
  root.mkdir(parents=True, exist_ok=True)
  pending = prepare(root, runs, retry_failed=retry_failed, log=log)
  invalid = {r.name: 2 for r in runs if r.error}
  if not pending:
    log(f"nothing to do: all {len(runs)} runs are done or failed")
    return invalid
  cache_dir = root / ".xla_cache"
  if backend == "local":
    return invalid | run_local(pending, parallel=parallel or default_parallel(), cache_dir=cache_dir,
                               log=log)
  if backend == "slurm":
    return invalid | run_slurm(pending, {**sweep.slurm, **(slurm or {})}, root=root,
                               cache_dir=cache_dir, log=log, wait=wait)
  if backend == "ray":
    return invalid | ray_backend.run_ray(pending, requests, root=root, address=ray_address,
                                         max_attempts=max_attempts, wait=wait, log=log)
  raise SweepError(f"--backend must be local, slurm or ray, got {backend!r}")
