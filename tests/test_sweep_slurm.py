"""The Slurm backend against a real Slurm cluster (``tests/slurm/cluster.sh up DIR`` starts
one on this machine; ``.ci/run`` does, and sets HYBRID_JAX_REQUIRE_SLURM=1 so the test
cannot silently skip there): a 2-run toy sweep, a duplicate submission that submits
nothing, a job cancelled with scancel, and a resubmission that resumes it."""

import json
import os
import shutil
import subprocess
import time

import numpy as np
import pytest

from test_sweep import cli, latest_checkpoint, losses, two_seeds_and_their_reference, write_sweep


def slurm_available() -> bool:
  if not shutil.which("sinfo"):
    return False
  try:
    return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=20).returncode == 0
  except (OSError, subprocess.SubprocessError):
    return False


pytestmark = pytest.mark.skipif(
    not slurm_available() and not os.environ.get("HYBRID_JAX_REQUIRE_SLURM"),
    reason="no Slurm cluster (start one with tests/slurm/cluster.sh up DIR)")


def job_id(run_dir):
  return json.loads((run_dir / "slurm_job.json").read_text())["job_id"]


def queued(job):
  out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], capture_output=True, text=True).stdout
  return out.strip() in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING")


def wait_for(predicate, timeout=300):
  deadline = time.time() + timeout
  while time.time() < deadline:
    if predicate():
      return True
    time.sleep(0.5)
  return False


def test_slurm_sweep_with_scancel_and_resubmit(tmp_path):
  steps = 400    # ~5 s of steps and checkpoints after step 8: scancel lands mid-run
  sweep, reference, root = two_seeds_and_their_reference(tmp_path, steps=steps)
  first = cli("sweep", "submit", str(sweep), "--root", str(root), "--backend", "slurm")
  assert first.returncode == 0 and first.stdout.count("submitted") == 2, first.stdout + first.stderr
  again = cli("sweep", "submit", str(sweep), "--root", str(root), "--backend", "slurm")
  assert again.stdout.count("already pending or running") + again.stdout.count("skipped") == 2, again.stdout
  run0 = root / "seed=0"
  job0 = job_id(run0)

  assert wait_for(lambda: latest_checkpoint(run0) >= 8), "the job never checkpointed"
  subprocess.run(["scancel", job0], check=True)
  assert wait_for(lambda: not queued(job0)) and wait_for(lambda: not queued(job_id(root / "seed=1")))
  status0 = json.loads((run0 / "status.json").read_text())
  assert status0["state"] == "preempted" and 0 < status0["step"] < steps, status0   # SIGTERM -> checkpoint
  resubmit = cli("sweep", "submit", str(sweep), "--root", str(root), "--backend", "slurm")
  assert resubmit.returncode == 0 and "submitted seed=0" in resubmit.stdout, resubmit.stdout
  r = cli("sweep", "submit", str(sweep), "--root", str(root), "--backend", "slurm", "--wait")
  assert r.returncode == 0, r.stdout + r.stderr
  for n in ("seed=0", "seed=1"):
    assert json.loads((root / n / "status.json").read_text())["state"] == "done"
    assert losses(root / n) == losses(reference / n)
  new_job = job_id(run0)
  assert new_job != job0
  err = "".join(p.read_text() for p in (root / ".slurm" / new_job).glob("*.err"))
  assert "resuming" in err and "from step 0/" not in err, err[-2000:]


def test_one_run_over_two_slurm_tasks_joins_one_jax_job(tmp_path):
  """``--slurm tasks_per_node=2``: both tasks of the job join one jax.distributed job (JAX
  reads the Slurm variables), split each batch, and train the losses one process trains."""
  sweep = write_sweep(tmp_path, """
      def get_sweep():
        return Sweep(base=tiny(), grid=axis("train.seed", [0]))
      """, steps=12)
  reference = tmp_path / "reference"
  assert cli("sweep", "submit", str(sweep), "--root", str(reference)).returncode == 0
  root = tmp_path / "root"
  r = cli("sweep", "submit", str(sweep), "--root", str(root), "--backend", "slurm",
          "--slurm", "tasks_per_node=2", "--slurm", "cpus_per_task=1", "--wait")
  assert r.returncode == 0, r.stdout + r.stderr
  run = root / "seed=0"
  assert json.loads((run / "status.json").read_text())["state"] == "done"
  logs = {p.name: p.read_text() for p in (root / ".slurm" / job_id(run)).glob("*_log.out")}
  assert len(logs) == 2 and all("connected to 1 peer" in text for text in logs.values()), logs
  ref, got = losses(reference / "seed=0"), losses(run)
  assert [s for s, _ in got] == [s for s, _ in ref]
  np.testing.assert_allclose([l for _, l in got], [l for _, l in ref], rtol=2e-4)
