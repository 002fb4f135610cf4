"""Checkpoints in a bucket (``--config.checkpoint.root=gs://...``) against a real local GCS:
gcp-storage-emulator in a child process (``tests/gcs_emulator.py``, which also says what it
fixes in the emulator). Nothing of hybrid_jax is mocked: trainers and evaluators are CLI
processes given the emulator's environment (``gcs_emulator.client_env``: it must be set before
they import jax, orbax or gcsfs, hence processes). The run directories stay on local disk.

Covers a run whose checkpoints are in the bucket (the local run's losses; its steps there,
none under the run), SIGKILL and rerun (it resumes from the bucket's newest finished step,
removes an unfinished one, and ends with the uninterrupted run's losses), a corrupt newest
step set aside in the bucket and re-trained exactly, ``eval`` reading the bucket's steps (the
local run's records), and the one-line refusals. An absolute-path root, and a reader of a
bucket run without the gcs extra, need no emulator. The tests that need the
emulator skip where the ``gcs`` extra or the emulator (the ``test`` extra) is missing, unless
``HYBRID_JAX_REQUIRE_GCS=1`` (``.ci/run``), which makes that a failure."""

import importlib
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

import gcs_emulator
from hybrid_jax.configs.rules import ConfigError
from hybrid_jax.resolve import resolve
from hybrid_jax.run import RunDir
from conftest import tiny_config, tiny_config_file
from test_sweep import _backend_log, cli, write_sweep

STEPS = 12
CONFIG_FILE = tiny_config_file(STEPS, "c.checkpoint.every = 5   # rolling steps 5 and 10 are deleted again: orbax deletes in the bucket")
KEYS = ("step", "tokens", "loss", "lr", "grad_norm", "answer_loss", "answer_acc")
BUCKET = "bucket"
ROOT = f"gs://{BUCKET}/ckpts"
REQUIRED = (("gcsfs", "the gcs extra: pip install 'hybrid_jax[gcs]'"),
            ("google.cloud.storage", "the gcs extra: pip install 'hybrid_jax[gcs]'"),
            ("gcp_storage_emulator", "the test extra's GCS emulator: pip install 'hybrid_jax[test]'"))


def _curve(workdir):
  return [{k: r[k] for k in KEYS} for r in RunDir(workdir).read_metrics()]


def _train(workdir, config_file, *extra, env=None, popen=False):
  argv = [sys.executable, "-m", "hybrid_jax.cli", "train", "--config", str(config_file),
          "--workdir", str(workdir), "--quiet", *extra]
  if popen:
    return subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  r = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
  r.stderr = "".join(l for l in r.stderr.splitlines(keepends=True) if not _backend_log(l))
  return r


@pytest.fixture(scope="module")
def gcs():
  """(environment for a client process, a gcsfs filesystem of this process) of a fresh
  emulator holding an empty bucket; stopped after the module's tests."""
  for module, where in REQUIRED:
    if os.environ.get("HYBRID_JAX_REQUIRE_GCS"):      # .ci/run: never skipped there
      importlib.import_module(module)
    else:
      pytest.importorskip(module, reason=f"{module} is not installed ({where})")
  from gcsfs.core import GCSFileSystem     # not gcsfs's default class, which first asks a
  proc, url = gcs_emulator.start(BUCKET)   # storage-control service the emulator lacks (60 s)
  try:
    fs = GCSFileSystem(endpoint_url=url, token="anon", skip_instance_cache=True)
    yield dict(os.environ, **gcs_emulator.client_env(url)), fs
  finally:
    proc.terminate()
    proc.wait(timeout=30)


def _bucket_steps(fs, name) -> dict[int, bool]:
  """{step: finished} of the numbered step directories under ROOT/name (finished: orbax's
  commit file is in it), read through gcsfs."""
  fs.invalidate_cache()
  prefix = f"{BUCKET}/ckpts/{name}"
  if not fs.exists(prefix):
    return {}
  names = [p.rstrip("/").rsplit("/", 1)[1] for p in fs.ls(prefix, detail=False)]
  return {int(n): fs.exists(f"{prefix}/{n}/commit_success.txt") for n in names if n.isdigit()}


@pytest.fixture(scope="module")
def runs(tmp_path_factory, config_file, gcs):
  """(local run, bucket run): the same config, checkpoints under the run and in the bucket."""
  env, _ = gcs
  local = tmp_path_factory.mktemp("local") / "run"
  bucket = tmp_path_factory.mktemp("bucket") / "run"
  for workdir, extra in ((local, ()), (bucket, (f"--config.checkpoint.root={ROOT}",))):
    r = _train(workdir, config_file, *extra, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
  return local, bucket


def test_a_run_with_a_bucket_root_keeps_its_steps_there_and_trains_as_a_local_run(runs, gcs):
  local, bucket = runs
  _, fs = gcs
  assert RunDir(bucket).read_status()["state"] == "done"
  assert _curve(bucket) == _curve(local)
  local_steps = sorted(int(p.name) for p in (local / "checkpoints").iterdir() if p.name.isdigit())
  assert _bucket_steps(fs, "run") == {s: True for s in local_steps}
  assert not (bucket / "checkpoints").exists()
  assert str(RunDir(bucket).checkpoint_dir) == f"{ROOT}/run"
  assert RunDir(bucket).checkpoint_dir.absolute() == RunDir(bucket).checkpoint_dir


def test_sigkill_then_rerun_resumes_from_the_bucket_and_equals_the_uninterrupted_run(
    tmp_path, config_file, runs, gcs):
  env, fs = gcs
  local, _ = runs
  workdir = tmp_path / "killed"
  run = RunDir(workdir)
  kill_at = random.Random(os.getpid()).randint(5, STEPS - 3)
  proc = _train(workdir, config_file, f"--config.checkpoint.root={ROOT}", env=env, popen=True)
  deadline = time.time() + 300
  while time.time() < deadline and proc.poll() is None and len(run.read_metrics()) < kill_at:
    time.sleep(0.02)
  proc.kill()
  proc.wait()
  assert proc.returncode == -signal.SIGKILL, "the run ended before it could be killed"
  assert run.read_status()["state"] == "running" and len(run.read_metrics()) < STEPS
  saved = [s for s, finished in _bucket_steps(fs, "killed").items() if finished]
  assert saved, "no checkpoint reached the bucket before the kill"
  fs.pipe(f"{BUCKET}/ckpts/killed/99/default/manifest.ocdbt", b"a save that never finished")
  r = _train(workdir, config_file, f"--config.checkpoint.root={ROOT}", env=env)
  assert r.returncode == 0, r.stderr[-3000:]
  resumed = int(r.stderr.split(f"resuming {workdir} from step ", 1)[1].split("/")[0])
  assert resumed == max(saved) or f"checkpoint {max(saved)} cannot be restored" in r.stderr, (
      saved, r.stderr)                       # killed mid-delete: the newest may be torn
  assert _curve(workdir) == _curve(local)
  assert run.read_status()["state"] == "done"
  steps = _bucket_steps(fs, "killed")
  assert 99 not in steps and all(steps.values()), steps


def test_a_corrupt_newest_step_in_the_bucket_is_set_aside_there_and_retrained_exactly(
    tmp_path, config_file, gcs):
  env, fs = gcs
  workdir = tmp_path / "torn"
  for attempt in ("first", "after the corruption"):
    r = _train(workdir, config_file, f"--config.checkpoint.root={ROOT}", env=env)
    assert r.returncode == 0, (attempt, r.stderr[-3000:])
    if attempt == "first":
      curve = _curve(workdir)
      step = f"{BUCKET}/ckpts/torn/{STEPS}"
      for path in fs.find(step):
        if fs.size(path):
          fs.pipe(path, b"garbage")
  warned = [l for l in r.stderr.splitlines() if f"checkpoint {STEPS} cannot be restored" in l]
  assert len(warned) == 1 and f"moved to {ROOT}/torn/corrupt/{STEPS}" in warned[0], r.stderr
  fs.invalidate_cache()
  assert fs.cat(f"{BUCKET}/ckpts/torn/corrupt/{STEPS}/default/manifest.ocdbt") == b"garbage"
  assert _bucket_steps(fs, "torn")[STEPS] and _curve(workdir) == curve


def _eval(workdir, env):
  return cli("eval", "--workdir", str(workdir), "--config.eval.tasks=",
             "--config.eval.short_rows=2", "--config.eval.longppl_rows=0", env=env)


def test_eval_reads_the_bucket_steps_and_scores_them_as_the_local_ones(runs, gcs):
  env, _ = gcs
  local, bucket = runs
  for workdir in (local, bucket):
    r = _eval(workdir, env)
    assert r.returncode == 0, r.stderr[-3000:]
  drop = lambda r: {k: v for k, v in r.items() if k != "eval_seconds"}
  records = [[drop(r) for r in RunDir(w).read_eval()] for w in (local, bucket)]
  steps = sorted(int(p.name) for p in (local / "checkpoints").iterdir() if p.name.isdigit())
  assert [r["step"] for r in records[1]] == steps
  assert records[1] == records[0]


def test_another_root_on_resume_and_a_new_run_over_a_taken_one_are_refused_in_one_line(
    tmp_path, config_file, runs, gcs):
  env, fs = gcs
  local, bucket = runs
  before = {p.name: p.read_bytes() for p in local.glob("*.json*")}
  moved = _train(local, config_file, f"--config.checkpoint.root={ROOT}", env=env)
  assert moved.returncode == 2 and moved.stderr.strip().splitlines() == [
      f"hybrid-jax: error: {local} holds a run with another config (checkpoint.root: None -> "
      f"'{ROOT}'); use a new --workdir"], moved.stderr
  assert before == {p.name: p.read_bytes() for p in local.glob("*.json*")}
  steps = _bucket_steps(fs, "run")
  twin = tmp_path / "run"                           # the bucket run's name, a new run
  taken = _train(twin, config_file, f"--config.checkpoint.root={ROOT}", env=env)
  assert taken.returncode == 2 and len(taken.stderr.strip().splitlines()) == 1, taken.stderr
  assert f"{ROOT}/run holds another run's checkpoints" in taken.stderr
  assert not (twin / "config.json").exists() and _bucket_steps(fs, "run") == steps


def test_a_bucket_root_without_its_client_is_one_line_before_anything_is_written(
    tmp_path, config_file):
  workdir = tmp_path / "run"
  code = ("import sys; sys.modules['gcsfs'] = None; from hybrid_jax.cli import main; "
          f"sys.exit(main(['train', '--config', {str(config_file)!r}, '--workdir', "
          f"{str(workdir)!r}, '--config.checkpoint.root={ROOT}']))")
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
  err = [l for l in r.stderr.splitlines() if l.strip() and not _backend_log(l)]
  assert r.returncode == 2 and len(err) == 1, r.stderr
  assert err[0].startswith("hybrid-jax: error: config.checkpoint.root: a gs:// root needs gcsfs")
  assert "pip install 'hybrid_jax[gcs]'" in err[0]
  assert not workdir.exists()


def test_an_absolute_path_root_holds_the_steps_without_any_cloud_package(tmp_path):
  from hybrid_jax.run import checkpoint_steps
  from hybrid_jax.standard_run import train
  c = tiny_config(steps=4)
  c.checkpoint.root = str(tmp_path / "shelf")
  train(c, tmp_path / "run", progress=False)
  assert not (tmp_path / "run" / "checkpoints").exists()
  assert checkpoint_steps(tmp_path / "run") == [1, 2, 3, 4]
  assert sorted(p.name for p in (tmp_path / "shelf" / "run").iterdir()) == ["1", "2", "3", "4"]
  assert train(c, tmp_path / "run", progress=False)["state"] == "done"   # resumes from there


def test_a_reader_of_a_bucket_run_without_its_client_gets_one_line(tmp_path, monkeypatch):
  from hybrid_jax.run import RunDirError, checkpoint_steps
  (tmp_path / "config.json").write_text(json.dumps({"checkpoint": {"root": ROOT}}))
  monkeypatch.setitem(sys.modules, "gcsfs", None)
  with pytest.raises(RunDirError, match=r"checkpoint.root=gs://bucket/ckpts: a gs:// root "
                                        r"needs gcsfs.*pip install 'hybrid_jax\[gcs\]'"):
    checkpoint_steps(tmp_path)


@pytest.mark.parametrize("root, why", [
    ("s3://bucket/x", "s3:// is not supported"),
    ("gs:///x", "names no bucket"),
    ("ckpts", "a path must be absolute"),
])
def test_a_root_that_cannot_hold_checkpoints_is_a_config_error(root, why):
  c = tiny_config()
  c.checkpoint.root = root
  with pytest.raises(ConfigError, match=f"^config.checkpoint.root: {why}"):
    resolve(c)


def test_a_sweep_root_in_a_bucket_is_refused_naming_checkpoint_root(tmp_path):
  sweep = write_sweep(tmp_path, """
      def get_sweep():
        return Sweep(base=tiny(), grid=axis("train.seed", [0]))
      """)
  r = cli("sweep", "submit", str(sweep), "--root", f"gs://{BUCKET}/runs")
  assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
  assert "shared POSIX filesystem" in r.stderr
  assert "--config.checkpoint.root=gs://BUCKET/PREFIX" in r.stderr
