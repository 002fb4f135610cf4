"""The run layer on its own: the one file lock, load_config's one-line errors, checkpoint
step listing without orbax, the architecture label."""

import subprocess
import sys
import textwrap

import pytest

from hybrid_jax.run import (FileLock, RunDir, RunDirBusy, RunDirError, architecture_label,
                            checkpoint_steps, load_config)


def _hold_in_another_process(path):
  """A child process that holds ``path``'s lock until its stdin closes."""
  code = textwrap.dedent(f"""
      import sys
      from hybrid_jax.run import FileLock
      lock = FileLock({str(path)!r})   # kept: closing the file would release the lock
      assert lock.acquire()
      print("held", flush=True)
      sys.stdin.read()
      """)
  child = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
  assert child.stdout.readline().strip() == "held"
  return child


def test_one_lock_serves_the_trainer_and_the_evaluator(tmp_path):
  child = _hold_in_another_process(tmp_path / ".lock")
  try:
    assert FileLock(tmp_path / ".lock").held()
    assert not FileLock(tmp_path / ".lock").acquire()
    with pytest.raises(RunDirBusy, match="in use"):
      RunDir(tmp_path).lock()
    RunDir(tmp_path).lock_eval()          # the evaluator's lock is another file
  finally:
    child.stdin.close()
    child.wait()
  assert not FileLock(tmp_path / ".lock").held()
  lock = FileLock(tmp_path / ".lock")
  assert lock.acquire() and not lock.held()   # held by us: not "another process"
  lock.release()
  assert not FileLock(tmp_path / "absent" / ".lock").held()
  assert not (tmp_path / "absent").exists()   # asking never creates the file


def test_load_config_and_checkpoint_steps_fail_in_one_line(tmp_path):
  with pytest.raises(RunDirError, match="does not exist"):
    load_config(tmp_path / "nope")
  with pytest.raises(RunDirError, match=r"no config\.json"):
    load_config(tmp_path)
  (tmp_path / "config.json").write_text("{not json")
  with pytest.raises(RunDirError, match="not valid JSON"):
    load_config(tmp_path)
  (tmp_path / "config.json").write_text('{"model": {"window": 5, "gone": 1}, "derived": {}}')
  cfg = load_config(tmp_path)
  assert cfg.model.window == 5 and "gone" not in cfg.model and cfg.model.pattern
  with pytest.raises(RunDirError, match="holds no checkpoints"):
    checkpoint_steps(tmp_path)
  for name in ("12", "3", "tmp.4.orbax-checkpoint-tmp", "corrupt"):
    (tmp_path / "checkpoints" / name).mkdir(parents=True)
  assert checkpoint_steps(tmp_path) == [3, 12]


def test_listing_a_run_needs_no_jax():
  code = ("import sys, hybrid_jax.run; "
          "print(sorted(m for m in ('jax', 'orbax') if m in sys.modules))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("model, label", [
    (dict(pattern="F", window=8), "F"),
    (dict(pattern="SF", window=8, pos_full="rope"), "SF w=8"),
    (dict(pattern="SF", window=4, pos_full="nope"), "SF w=4 NoPE-full"),
    (dict(pattern="H", window=16), "H w=16"),
    (dict(pattern="LF", window=None, pos_full="nope"), "LF NoPE-full"),
])
def test_one_architecture_label(model, label):
  assert architecture_label(model) == label


def test_a_key_the_schema_gained_after_a_run_started_counts_as_its_default():
  """A run written before ``model.remat`` / ``train.microbatches`` existed still resumes,
  and asking for another value there is still refused."""
  import json

  from conftest import tiny_config
  from hybrid_jax.resolve import resolve
  from hybrid_jax.run import config_diff
  new = json.loads(resolve(tiny_config()).to_json())
  old = json.loads(json.dumps(new))
  del old["model"]["remat"], old["train"]["microbatches"]
  assert config_diff(old, new) == []
  new["train"]["microbatches"] = 2
  assert config_diff(old, new) == ["train.microbatches: 1 -> 2"]
  old["model"]["window"] = new["model"]["window"] + 1
  assert len(config_diff(old, new)) == 2


def test_a_bad_line_is_warned_about_once_however_often_a_process_reads_it(tmp_path, capsys):
  run = RunDir(tmp_path)
  for step in (1, 2):
    run.append_metrics(dict(step=step, tokens=step * 10, loss=1.0))
  with open(run.metrics_path, "a") as f:
    f.write("{not json\n")
  run.append_metrics(dict(step=3, tokens=30, loss=1.0))
  readers = [run, run, RunDir(tmp_path)]             # resume, then the curves; another reader
  assert all([r["step"] for r in reader.read_metrics()] == [1, 2, 3] for reader in readers)
  assert run.skipped == 2 and readers[-1].skipped == 1   # each read still counts what it skipped
  err = capsys.readouterr().err.splitlines()
  assert err == [f"hybrid-jax: warning: {run.metrics_path}:3: record skipped (not a JSON line)"]
  with open(run.metrics_path, "a") as f:              # another bad line: warned about in turn
    f.write("[1, 2]\n")
  run.read_metrics()
  assert capsys.readouterr().err.splitlines() == [
      f"hybrid-jax: warning: {run.metrics_path}:5: record skipped (a JSON list, not an object)"]
