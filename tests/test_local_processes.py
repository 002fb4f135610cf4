"""``hybrid-jax train --local_processes N``: one run as N single-threaded processes on this
host. Its flags are checked before anything starts; it trains the run one process trains
(within rounding), is deterministic, and a SIGTERM to it checkpoints every process and
resumes exactly."""

import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from conftest import tiny_config_file
from hybrid_jax.run import RunDir

STEPS = 24
CONFIG_FILE = tiny_config_file(STEPS, "c.checkpoint.every, c.checkpoint.log_per_octave = 4, 0   # (each two-process save: ~0.5 s)")
KEYS = ("step", "tokens", "loss", "lr", "grad_norm", "answer_loss", "answer_acc")
two_cores = pytest.mark.skipif(
    len(os.sched_getaffinity(0) if hasattr(os, "sched_getaffinity") else range(1)) < 2,
    reason="needs two cores")


def _curve(workdir):
  return [{k: r[k] for k in KEYS} for r in RunDir(workdir).read_metrics()]


def _cli(workdir, config_file, *extra):
  return [sys.executable, "-m", "hybrid_jax.cli", "train", "--config", str(config_file),
          "--workdir", str(workdir), "--quiet", *extra]


def _errors(stderr):
  return [l for l in stderr.splitlines()
          if not l.startswith(("WARNING: All log messages before absl", "I0000 ", "W0000 ", "E0000 "))]


@pytest.mark.parametrize("extra, message", [
    (["--local_processes", "999"], "--local_processes must be 1.."),
    (["--local_processes=x"], "argument --local_processes: invalid int value: 'x'"),
    (["--local_processes", "2", "--coordinator", "127.0.0.1:1"], "it takes no --coordinator"),
    pytest.param(["--local_processes", "2", "--config.train.batch_size=6",
                  "--config.train.microbatches=2"],
                 "must be a multiple of the processes x microbatches (2 x 2)", marks=two_cores),
    pytest.param(["--local_processes", "2", "--config.eval.every=4"],
                 "evaluation during multi-process training is not supported", marks=two_cores),
])
def test_bad_local_processes_fail_in_one_line_before_creating_anything(tmp_path, config_file,
                                                                       extra, message):
  workdir = tmp_path / "run"
  proc = subprocess.run(_cli(workdir, config_file, *extra), capture_output=True, text=True)
  assert proc.returncode == 2, proc.stderr[-2000:]
  lines = _errors(proc.stderr)
  assert len(lines) == 1 and lines[0].startswith("hybrid-jax: error: ") and message in lines[0], lines
  assert not workdir.exists()


@pytest.fixture(scope="module")
def one_process_run(tmp_path_factory, config_file):
  workdir = tmp_path_factory.mktemp("one") / "run"
  subprocess.run(_cli(workdir, config_file), check=True, capture_output=True)
  return workdir


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory, config_file):
  workdir = tmp_path_factory.mktemp("two") / "run"
  proc = subprocess.run(_cli(workdir, config_file, "--local_processes", "2"),
                        capture_output=True, text=True)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.count("hybrid-jax: run ") == 1           # process 0 prints, once
  return workdir


@two_cores
def test_two_local_processes_train_the_run_one_process_trains(one_process_run, two_process_run):
  ours, one = _curve(two_process_run), _curve(one_process_run)
  assert [r["step"] for r in ours] == list(range(1, STEPS + 1))
  np.testing.assert_allclose([r["loss"] for r in ours], [r["loss"] for r in one], rtol=2e-4)
  assert RunDir(two_process_run).read_status()["state"] == "done"
  # Deterministic: the SIGTERM test below relaunches the run and gets this curve exactly.


@two_cores
def test_sigterm_to_the_launcher_stops_every_process_at_its_checkpoint(tmp_path, config_file):
  """The launcher forwards the signal: the run stops preempted at a checkpointed step (that
  the same command then resumes exactly: the next test, whose signal reaches one process)."""
  workdir = tmp_path / "run"
  proc = _start_two_processes(workdir, config_file)
  proc.send_signal(signal.SIGTERM)
  proc.wait(timeout=120)
  assert proc.returncode == 143
  _stopped_at_its_checkpoint(workdir)


def _start_two_processes(workdir, config_file):
  """The launcher of a two-process run, once the run has logged a few steps."""
  run = RunDir(workdir)
  proc = subprocess.Popen(_cli(workdir, config_file, "--local_processes", "2"),
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  t0 = time.time()
  while time.time() - t0 < 300 and proc.poll() is None and len(run.read_metrics()) < 6:
    time.sleep(0.02)
  return proc


def _stopped_at_its_checkpoint(workdir) -> dict:
  """The status says preempted and the newest checkpoint is that step (nothing since is
  lost); returns the status."""
  run = RunDir(workdir)
  status = run.read_status()
  assert status["state"] == "preempted" and status["step"] < STEPS, status
  kept = [int(p.name) for p in run.checkpoint_dir.iterdir() if p.name.isdigit()]
  assert max(kept) == status["step"]
  return status


def _stopped_at_its_checkpoint_and_resumes_exactly(workdir, config_file, two_process_run):
  """``_stopped_at_its_checkpoint``, and the same command resumes to the uninterrupted run's
  curve (every step: those before the signal too); returns the status."""
  status = _stopped_at_its_checkpoint(workdir)
  subprocess.run(_cli(workdir, config_file, "--local_processes", "2"), check=True,
                 capture_output=True)
  assert _curve(workdir) == _curve(two_process_run)
  return status


def _child_with_process_id(launcher_pid, process_id):
  """The pid of the launcher's training process ``process_id`` (Linux /proc)."""
  children = open(f"/proc/{launcher_pid}/task/{launcher_pid}/children").read().split()
  for pid in children:
    env = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
    if f"HYBRID_JAX_PROCESS_ID={process_id}".encode() in env:
      return int(pid)
  raise AssertionError(f"no process {process_id} among {children}")


@two_cores
@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_sigterm_to_one_process_stops_all_at_the_same_checkpointed_step(tmp_path, config_file,
                                                                        two_process_run):
  """Only process 1 sees the signal; its vote rides the step's all-reduce, so process 0 (which
  writes the status) stops at the same step, both checkpoint it, and the run resumes exactly."""
  workdir = tmp_path / "run"
  proc = _start_two_processes(workdir, config_file)
  os.kill(_child_with_process_id(proc.pid, 1), signal.SIGTERM)
  proc.wait(timeout=120)
  status = _stopped_at_its_checkpoint_and_resumes_exactly(workdir, config_file, two_process_run)
  assert status["error"] == "stopped by a signal to another process of the job", status


GLOO_SCRIPT = """
import os
from hybrid_jax.train import distributed
distributed.initialize()
import jax, numpy as np
from jax.experimental import multihost_utils
multihost_utils.process_allgather(np.zeros(3))            # the first collective starts gloo
n = distributed.quiet_gloo_threads()
nices = [int(open(f"/proc/self/task/{t}/stat").read().rsplit(")", 1)[1].split()[16])
         for t in os.listdir("/proc/self/task")]
print("RESULT", n, nices.count(19), flush=True)
"""


@pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs Linux /proc")
def test_gloo_event_loop_threads_are_lowered_to_nice_19_after_the_first_collective(tmp_path):
  """The busy-polling loop must not hold a pinned core after each all-reduce: in a two-process
  CPU job each process finds its gloo loop thread and renices exactly it."""
  from hybrid_jax.train import local_processes
  script = tmp_path / "gloo.py"
  script.write_text(GLOO_SCRIPT)
  port = local_processes.free_port()
  procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True,
                            env=dict(local_processes.process_env(i, 2, port), JAX_PLATFORMS="cpu"))
           for i in range(2)]
  outs = [p.communicate(timeout=120) for p in procs]
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, err[-2000:]
    result = [l.split()[1:] for l in out.splitlines() if l.startswith("RESULT")]
    assert result == [["1", "1"]], out                     # one loop thread, niced, no other


def test_quiet_gloo_threads_does_nothing_in_one_process():
  from hybrid_jax.train import distributed
  assert distributed.quiet_gloo_threads() == 0
