"""kv_recall: a long-context task in the synthetic source's tokens, with the task contract
(exact length, answer at the end, evidence where the asked value is written), and its place
in evaluation (by name; not in "all"; text-only settings ids unchanged) and in the analyses."""

import hashlib
import json

import numpy as np
import pytest

from hybrid_jax.data import synthetic as S
from hybrid_jax.data import synthetic_tasks, task_families, tasks
from hybrid_jax.core import eval_settings


@pytest.mark.parametrize("length", [synthetic_tasks.min_length("kv_recall"), 128, 1000])
def test_an_oracle_finds_the_answer_at_the_evidence(length):
  for depth in (0.0, 0.5, 1.0):
    for index in range(4):
      ex = synthetic_tasks.make_example("kv_recall", length=length, depth=depth, seed=2, index=index)
      t = ex.tokens
      assert t.dtype == np.int32 and t.shape == (length,)
      assert list(ex.answer_positions) == [length - 1] and t[length - 3] == S.Q_MARK
      key = t[length - 2]
      # oracle: the value written after "KV key" earlier in the context, found by search
      kv = [i for i in range(length - 3) if t[i] == S.KV_MARK and t[i + 1] == key]
      assert len(kv) == 1                                  # keys are distinct
      assert list(ex.evidence_positions) == [kv[0] + 2] and t[kv[0] + 2] == t[length - 1]
      assert S.VALUES[0] <= t[length - 1] <= S.VALUES[-1]
      filler = np.ones(length, bool)
      for i in np.flatnonzero(t == S.KV_MARK):
        filler[i:i + 3] = False
      filler[length - 3:] = False
      assert (t[filler] < S.N_FILLER).all()               # the rest is the source's filler


def test_depth_sets_the_distance_to_the_evidence():
  length = 512
  for index in range(3):
    distance = [length - 1 - synthetic_tasks.make_example(
        "kv_recall", length=length, depth=d, seed=0, index=index).evidence_positions[0]
                for d in (0.0, 0.25, 0.5, 0.75, 1.0)]
    assert np.all(np.diff(distance) < 0), distance
    budget = length - 3 - 4 * 3
    expected = [(1 - d) * budget for d in (0.0, 0.25, 0.5, 0.75, 1.0)]
    assert np.allclose(distance, expected, atol=4 * 3 + 3), (distance, expected)


def test_examples_are_pure_functions_of_their_arguments():
  a = synthetic_tasks.make_example("kv_recall", length=200, depth=0.3, seed=1, index=5)
  b = synthetic_tasks.make_example("kv_recall", length=200, depth=0.3, seed=1, index=5)
  np.testing.assert_array_equal(a.tokens, b.tokens)
  others = [synthetic_tasks.make_example("kv_recall", length=200, depth=0.3, seed=s, index=i)
            for s, i in ((2, 5), (1, 6))]
  assert all(not np.array_equal(a.tokens, o.tokens) for o in others)


def test_closed_value_set_for_probing():
  seen = set()
  for index in range(60):
    ex = synthetic_tasks.make_example("kv_recall", length=64, depth=0.5, seed=0, index=index,
                                      n_classes=5)
    assert 0 <= ex.answer_class < 5 and ex.tokens[-1] == S.VALUES[ex.answer_class]
    seen.add(ex.answer_class)
  assert seen == set(range(5))
  b = task_families.make_batch("kv_recall", length=64, depth=0.5, seed=0, indices=[3, 1],
                               n_classes=5)
  assert b["tokens"].shape == (2, 64) and b["answer_mask"][:, -1].all()
  assert list(b["answer_class"]) == [synthetic_tasks.make_example(
      "kv_recall", length=64, depth=0.5, seed=0, index=i, n_classes=5).answer_class for i in (3, 1)]


@pytest.mark.parametrize("kwargs, field", [
    (dict(length=10), "length"), (dict(depth=1.5), "depth"), (dict(n_classes=99), "n_classes"),
    (dict(tokenizer=object()), "tokenizer")])
def test_bad_arguments_name_the_field(kwargs, field):
  args = dict(length=64, depth=0.5, seed=0, index=0) | kwargs
  with pytest.raises(ValueError, match=f"^{field}: "):
    synthetic_tasks.make_example("kv_recall", **args)


def test_eval_takes_kv_recall_by_name_but_all_stays_the_text_tasks():
  assert eval_settings.task_names("all") == tasks.TASK_NAMES
  assert eval_settings.task_names("kv_recall,mqar") == ("kv_recall", "mqar")
  assert task_families.family("kv_recall") is synthetic_tasks
  assert task_families.min_length("mqar") == tasks.min_length("mqar")
  with pytest.raises(ValueError, match="^name: unknown task"):
    task_families.family("nope")


def test_text_only_settings_ids_are_unchanged():
  """Adding a task family must not make every existing run evaluate again."""
  from hybrid_jax.resolve import resolve
  from hybrid_jax.configs.default import get_config
  s = eval_settings.EvalSettings.from_config(resolve(get_config()))
  d = s.to_dict()
  d["reference_step"] = s.reference_step
  d["tasks_version"] = tasks.TASKS_VERSION
  want = hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:12]
  assert s.settings_id() == want
  kv = eval_settings.EvalSettings(**{**s.__dict__, "tasks": ("kv_recall",)})
  assert kv.settings_id() != eval_settings.EvalSettings(**{**s.__dict__, "tasks": ()}).settings_id()


def test_a_synthetic_run_is_evaluated_and_analysed_on_kv_recall(tmp_path, capsys):
  from conftest import tiny_config
  from hybrid_jax import cli
  from hybrid_jax.eval.evaluate import evaluate_run
  from hybrid_jax.standard_run import train
  c = tiny_config("SF", steps=2)
  c.checkpoint.every = 2
  c.eval.tasks, c.eval.lengths, c.eval.depths = "kv_recall", (64,), (0.0, 1.0)
  c.eval.examples, c.eval.short_rows, c.eval.longppl_rows = 2, 0, 0
  run = tmp_path / "run"
  train(c, str(run))
  record = evaluate_run(run, log=lambda s: None)[-1]
  assert record["step"] == 2
  keys = {"retrieval_acc/kv_recall/64/d0.00", "retrieval_acc/kv_recall/64/d1.00",
          "retrieval_acc/kv_recall", "retrieval_acc"}
  assert keys <= set(record) and all(0 <= record[k] <= 1 for k in keys)
  assert cli.main(["analyze", "heads", str(run), "--task", "kv_recall", "--length", "64",
                   "--samples", "2"]) == 0
  heads = json.loads((run / "analysis" / "heads-step2.json").read_text())
  assert heads["task"] == "kv_recall" and np.array(heads["mass"], float).shape == (2, 4)


@pytest.mark.parametrize("length", [synthetic_tasks.min_length("kv_recall_start"), 64, 300])
def test_kv_recall_start_puts_the_fact_first_and_an_oracle_finds_the_answer(length):
  for depth in (0.0, 0.25, 0.5, 1.0):
    for index in range(4):
      ex = synthetic_tasks.make_example("kv_recall_start", length=length, depth=depth, seed=3,
                                        index=index, n_classes=8)
      t, (a,) = ex.tokens, ex.answer_positions
      assert t.shape == (length,) and t[0] == S.KV_MARK and list(ex.evidence_positions) == [2]
      assert t[a - 2] == S.Q_MARK and t[a - 1] == t[1] and t[a] == t[2]   # Q key -> its value
      kv = [i for i in range(a - 2) if t[i] == S.KV_MARK and t[i + 1] == t[a - 1]]
      assert kv == [0]                                     # the asked key is written once
      assert t[a] == S.VALUES[ex.answer_class]
      assert (t == S.KV_MARK).sum() == synthetic_tasks.N_NEEDLES


def test_kv_recall_start_gives_kv_recalls_distances_at_a_fixed_offset():
  """Same depth: the same query-to-fact distance as kv_recall (within the facts between
  them), the fact at offset 0 instead of at depth x length."""
  length = 256
  for depth in (0.0, 0.25, 0.5, 0.75):
    for index in range(3):
      start = synthetic_tasks.make_example("kv_recall_start", length=length, depth=depth, seed=0, index=index)
      end = synthetic_tasks.make_example("kv_recall", length=length, depth=depth, seed=0, index=index)
      d_start = start.answer_positions[0] - start.evidence_positions[0]
      d_end = end.answer_positions[0] - end.evidence_positions[0]
      assert abs(d_start - d_end) <= 3 * synthetic_tasks.N_NEEDLES, (depth, d_start, d_end)
      assert start.evidence_positions[0] == 2
      if depth > 0:
        assert end.evidence_positions[0] > 2 + 0.5 * depth * length   # kv_recall's fact moves


@pytest.mark.parametrize("length", [synthetic_tasks.min_length("kv_recall_offset"), 64, 128, 301])
def test_kv_recall_offset_fixes_the_distance_and_moves_the_fact(length):
  """Every depth: the answer exactly length // 2 after the asked value, found by an oracle
  search; the fact's offset grows with depth, from 0 to the query last at depth 1."""
  for index in range(4):
    offsets = []
    for depth in (0.0, 0.25, 0.5, 0.75, 1.0):
      ex = synthetic_tasks.make_example("kv_recall_offset", length=length, depth=depth, seed=4,
                                        index=index, n_classes=8)
      t, (a,), (e,) = ex.tokens, ex.answer_positions, ex.evidence_positions
      assert t.dtype == np.int32 and t.shape == (length,)
      assert a - e == length // 2
      assert t[a - 2] == S.Q_MARK and t[a] == S.VALUES[ex.answer_class]
      kv = [i for i in range(a - 2) if t[i] == S.KV_MARK and t[i + 1] == t[a - 1]]
      assert kv == [e - 2] and t[e] == t[a]                 # the asked key is written once, there
      assert (t == S.KV_MARK).sum() == synthetic_tasks.N_NEEDLES
      assert all(e - 2 < i < a - 2 for i in np.flatnonzero(t == S.KV_MARK) if i != e - 2)
      offsets.append(e - 2)
    assert offsets[0] == 0 and np.all(np.diff(offsets) > 0), offsets
    assert offsets[-1] + 2 + length // 2 == length - 1      # depth 1: the query last


def test_kv_recall_offset_is_evaluated_with_one_distance_bin():
  from hybrid_jax.eval.retrieval import distance_bin, evidence_distance
  b = task_families.make_batch("kv_recall_offset", length=64, depth=0.5, seed=0, indices=range(6))
  d = evidence_distance(np.asarray(b["answer_mask"]), np.asarray(b["evidence_mask"]))
  assert set(d.tolist()) == {32} and distance_bin(32) == (32, 64)
  assert eval_settings.task_names("kv_recall,kv_recall_offset") == ("kv_recall", "kv_recall_offset")


def test_the_examples_committed_evaluations_read_have_not_moved():
  """The stored runs' eval records were scored on these examples (seed 0, T = 64 and 128, the
  toy study's depths): a change to them must bump TASKS_VERSION, so every run evaluates anew."""
  h = hashlib.sha256()
  for name in synthetic_tasks.TASK_NAMES:
    for length in (64, 128):
      for depth in (0.0, 0.25, 0.5):
        for index in range(4):
          ex = synthetic_tasks.make_example(name, length=length, depth=depth, seed=0, index=index)
          for a in (ex.tokens, ex.answer_positions, ex.evidence_positions):
            h.update(a.tobytes())
  assert (synthetic_tasks.TASKS_VERSION, h.hexdigest()[:16]) == (1, "6dd23f49680eefaa")
