"""experiments.toy_study.study: which runs are read, how seeds are aligned and summarised."""

import json
import math

import numpy as np
import pytest

from experiments.toy_study import study


def fake_run(root, name, *, pattern="SF", window=4, pos_full="rope", size="toy-xs", seed=0,
             budget=30.0, curve=(), state="done", n=197184, extra=None):
  """A run directory as the trainer leaves it, with an eval curve of (step, far acc, short)."""
  path = root / name
  (path / "checkpoints" / "1").mkdir(parents=True)
  config = dict(model=dict(size=size, pattern=pattern, window=window, pos_full=pos_full,
                           n_layers=4),
                train=dict(seed=seed, tokens_per_param=budget),
                derived=dict(non_embedding_params=n, tokens=curve[-1][0] * 4096 if curve else 0))
  (path / "config.json").write_text(json.dumps(config))
  (path / "status.json").write_text(json.dumps(dict(state=state, step=0, total_steps=0, error=None,
                                                    updated="2099-01-01T00:00:00+0000")))
  lines = []
  for step, acc, short in curve:
    rec = {"step": step, "tokens": step * 4096, "settings_id": "s1", "short_loss": short,
           "retrieval_acc/kv_recall/64/d0.00": acc, "retrieval_acc/kv_recall/64/d0.25": acc,
           "retrieval_acc/kv_recall/64/d0.50": acc, "retrieval_acc/kv_recall/64": acc,
           "retrieval_acc/kv_recall/128/d0.00": acc / 2, "retrieval_acc/kv_recall/128/d0.25": acc / 2,
           "retrieval_acc/kv_recall/128/d0.50": acc / 2, "retrieval_acc/kv_recall/128": acc / 2,
           "settings": {"examples": 32, "depths": [0.0, 0.25, 0.5], "lengths": [64, 128]}}
    rec.update(extra(step) if extra else {})
    lines.append(json.dumps(rec))
  (path / "eval.jsonl").write_text("\n".join(lines) + "\n")
  (path / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "loss": short}) + "\n"
                                              for s, _, short in curve))
  return path


def test_load_runs_keeps_finished_runs_and_their_latest_settings(tmp_path):
  fake_run(tmp_path, "a", curve=[(100, 0.1, 3.0), (200, 0.3, 2.9)])
  fake_run(tmp_path, "b", curve=[(100, 0.2, 3.0)], state="running")
  path = fake_run(tmp_path, "c", seed=1, curve=[(100, 0.5, 3.0)])
  with open(path / "eval.jsonl", "a") as f:   # an older settings id first: only the latest counts
    f.write(json.dumps({"step": 100, "tokens": 1, "settings_id": "s2", "short_loss": 9.0}) + "\n")
  runs = study.load_runs(tmp_path)
  assert [r.path.name for r in runs] == ["a", "c"]
  assert [r["step"] for r in runs[0].curve] == [100, 200]
  assert runs[1].curve[0]["short_loss"] == 9.0 and len(runs[1].curve) == 1
  with pytest.raises(study.StudyInputError, match="does not exist"):
    study.load_runs(tmp_path / "missing")


def test_select_and_labels(tmp_path):
  fake_run(tmp_path, "s1", seed=1, curve=[(100, 0.1, 3.0)])
  fake_run(tmp_path, "s0", seed=0, curve=[(100, 0.1, 3.0)])
  fake_run(tmp_path, "nope", pos_full="nope", curve=[(100, 0.1, 3.0)])
  fake_run(tmp_path, "f", pattern="F", window=16, curve=[(100, 0.1, 3.0)])
  runs = study.load_runs(tmp_path)
  sel = study.select(runs, pattern="SF", pos_full="rope", window=4)
  assert [r.seed for r in sel] == [0, 1]
  assert {r.label for r in runs} == {"SF w=4", "SF w=4 NoPE-full", "F"}
  with pytest.raises(TypeError, match="unknown selector"):
    study.select(runs, windw=4)


def test_curves_align_on_shared_steps(tmp_path):
  fake_run(tmp_path, "a", curve=[(100, 0.1, 3.0), (200, 0.2, 2.9), (300, 0.3, 2.8)])
  fake_run(tmp_path, "b", seed=1, curve=[(100, 0.0, 3.1), (300, 0.5, 2.7)])
  runs = study.load_runs(tmp_path)
  tokens, values = study.curves(runs, study.mean_of("retrieval_acc/kv_recall/64/d0.00",
                                                    "retrieval_acc/kv_recall/128"))
  np.testing.assert_array_equal(tokens, [100 * 4096, 300 * 4096])
  np.testing.assert_allclose(values, [[0.075, 0.225], [0.0, 0.375]])
  fake_run(tmp_path, "c", seed=2, curve=[(200, 0.1, 3.0)])
  with pytest.raises(study.StudyInputError, match="share no evaluated step"):
    study.curves(study.load_runs(tmp_path), study.mean_of("short_loss"))
  with pytest.raises(study.StudyInputError, match="no finished run"):
    study.curves([], study.mean_of("short_loss"))


def test_stats_and_tokens_to():
  s = study.stats([1.0, 2.0, None, 3.0])
  assert (s.mean, s.lo, s.hi, s.n) == (2.0, 1.0, 3.0, 3) and math.isclose(s.std, 1.0)
  assert str(s) == "2 ± 1 [1, 3]"
  assert str(study.stats([0.5])) == "0.5 (1 seed)"
  assert study.stats([None]).n == 0 and str(study.stats([])) == "-"
  tokens = np.array([1.0, 2.0, 3.0])
  assert study.tokens_to(tokens, [0.1, 0.3, 0.2], 0.25) == 2.0
  assert study.tokens_to(tokens, [0.1, 0.2, 0.2], 0.25) is None


def test_train_seconds_from_timestamps(tmp_path):
  path = fake_run(tmp_path, "a", curve=[(100, 0.1, 3.0)])
  run = study.load_runs(tmp_path)[0]
  import os
  import datetime
  end = datetime.datetime(2099, 1, 1, tzinfo=datetime.timezone.utc).timestamp()
  os.utime(path / "checkpoints" / "1", (end - 90, end - 90))
  assert run.train_seconds() == pytest.approx(90)
  assert study.train_minutes([run, run]) == pytest.approx((3.0, 1.5))


def test_markdown_table_and_atomic_report(tmp_path):
  text = study.markdown_table(["a", "b"], [[1, study.stats([1.0, 3.0])]])
  assert text.splitlines() == ["| a | b |", "|---|---|", "| 1 | 2 ± 1.4 [1, 3] |"]
  study.write_report(tmp_path / "x" / "REPORT.md", "hello\n")
  assert (tmp_path / "x" / "REPORT.md").read_text() == "hello\n"


def test_censored_ranks_never_as_slowest_and_verdict_has_both_sections():
  assert list(study.censored([2.0, None, 1.0])) == [2.0, np.inf, 1.0]
  text = study.verdict(["- a"], [])
  assert text.index("## What reproduced") < text.index("- a") < text.index("## What did not")
  assert text.endswith("- Nothing left over.")


def test_tokens_cell_is_in_millions_and_counts_the_seeds_that_never_got_there():
  assert study.tokens_cell([1e6, 3e6, None]) == "2 ± 1.4 [1, 3] (1 never)"
  assert study.tokens_cell([None, None]) == "never (2 never)"
