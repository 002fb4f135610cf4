"""Evaluation: a trained tiny model beats chance, eval.jsonl is idempotent per settings,
bad input fails in one line with nothing written, LongPPL picks the tokens that need long
context, and training with eval.every keeps exact resume."""

import dataclasses
import json
import signal
import types

import numpy as np
import pytest

from conftest import tiny_config
from hybrid_jax import cli
from hybrid_jax.data import synthetic as syn
from hybrid_jax.core import eval_settings
from hybrid_jax.eval.checkpoints import EvalInputError
from hybrid_jax.eval.evaluate import evaluate_run
from hybrid_jax.eval.longppl import LongPPLEval, truncated_index
from hybrid_jax.core.eval_settings import EvalSettings
from hybrid_jax.train.loop import Preempted
from hybrid_jax.standard_run import train
from hybrid_jax.run import RunDir, RunDirError

KV_TASK = "kv_recall"


def _kv_recall_tasks():
  """A task in the training data's own format (``KV key value`` ... ``Q key value``), so a
  tiny model trained for seconds on ``SyntheticRetrieval`` can solve it: the easy setting
  that shows the evaluator measures retrieval (chance is 1 / len(VALUES))."""
  @dataclasses.dataclass(frozen=True)
  class Example:
    tokens: np.ndarray
    answer_positions: np.ndarray
    evidence_positions: np.ndarray
    depth: float
    answer_class: int

  def make_example(name, *, length, depth, seed, index, tokenizer=None, corpus=None):
    rng = np.random.default_rng([seed, index, length])
    words, lengths, probs = syn.lexicon()
    ids = rng.choice(len(probs), size=length, p=probs)
    tokens = np.concatenate([words[i][:lengths[i]] for i in ids])[:length].astype(np.int32)
    key, value = rng.choice(syn.KEYS), rng.choice(syn.VALUES)
    at = int(round(depth * (length - 6)))
    tokens[at:at + 3] = (syn.KV_MARK, key, value)
    tokens[-3:] = (syn.Q_MARK, key, value)
    return Example(tokens, np.array([length - 1]), np.array([at + 2]), depth,
                   int(value - syn.VALUES[0]))

  def make_batch(name, *, length, depth, seed, indices, tokenizer=None, corpus=None):
    ex = [make_example(name, length=length, depth=depth, seed=seed, index=i) for i in indices]
    tokens = np.stack([e.tokens for e in ex])
    answer, evidence = np.zeros(tokens.shape, bool), np.zeros(tokens.shape, bool)
    for i, e in enumerate(ex):
      answer[i, e.answer_positions] = evidence[i, e.evidence_positions] = True
    return dict(tokens=tokens, answer_mask=answer, evidence_mask=evidence)

  return types.SimpleNamespace(TASK_NAMES=(KV_TASK,), min_length=lambda name: 16,
                               Example=Example, make_example=make_example, make_batch=make_batch)


@pytest.fixture(scope="module")
def kv_tasks():
  with pytest.MonkeyPatch.context() as mp:
    module = _kv_recall_tasks()
    mp.setattr(eval_settings, "task_module", lambda: module)
    yield module


def _small_eval(c, tasks=KV_TASK, lengths=(32,)):
  e = c.eval
  e.tasks, e.lengths, e.depths, e.examples = tasks, lengths, (0.5, 1.0), 32
  e.short_rows, e.longppl_length, e.longppl_window, e.longppl_rows = 8, 96, 16, 8
  return c


def retrieval_config(steps=500):
  """Full attention, d_model 64: learns the retrieval in a few hundred steps (~15 s)."""
  c = tiny_config(pattern="F", steps=steps, d_model=64)
  c.data.seq_len, c.data.n_pairs = 32, 5
  c.train.batch_size, c.train.lr, c.train.warmup_steps, c.train.log_every = 32, 3e-3, 20, 50
  c.train.schedule = "constant"
  c.checkpoint.every, c.checkpoint.log_per_octave = 1000, 1
  return _small_eval(c)


@pytest.fixture(scope="module")
def trained(tmp_path_factory, kv_tasks):
  workdir = tmp_path_factory.mktemp("eval") / "run"
  train(retrieval_config(), workdir, progress=False)
  first = evaluate_run(workdir, log=lambda *_: None)
  return workdir, first


def _by_step(records):
  return {r["step"]: r for r in records}


def test_trained_model_beats_chance_and_untrained_does_not(trained):
  workdir, records = trained
  by_step = _by_step(records)
  chance = 1 / len(syn.VALUES)
  final = by_step[max(by_step)]
  assert final["retrieval_acc"] > 5 * chance, final["retrieval_acc"]   # 64 examples
  assert by_step[1]["retrieval_acc"] < 0.1
  assert final["short_loss"] < by_step[1]["short_loss"] - 1.0
  assert final["short_ppl"] == pytest.approx(np.exp(final["short_loss"]))
  cells = [final[f"retrieval_acc/{KV_TASK}/32/d{d:.2f}"] for d in (0.5, 1.0)]
  assert final["retrieval_acc"] == pytest.approx(np.mean(cells))
  assert final["tokens"] == final["step"] * 32 * 32
  assert final["settings"]["tasks"] == [KV_TASK] and final["settings"]["short_length"] == 32


def test_eval_is_idempotent_and_new_settings_evaluate_again(trained, kv_tasks):
  workdir, records = trained
  run = RunDir(workdir)
  steps = sorted(int(p.name) for p in run.checkpoint_dir.iterdir() if p.name.isdigit())
  assert sorted(r["step"] for r in records) == steps
  before = run.eval_path.read_bytes()
  assert evaluate_run(workdir, log=lambda *_: None) == []
  assert run.eval_path.read_bytes() == before
  # Another setting is another id: every checkpoint again, appended after the old lines.
  code, _ = _cli(["eval", "--workdir", str(workdir), "--config.eval.examples=4",
                  "--config.eval.longppl_rows=0", "--config.eval.short_rows=0"])
  assert code == 0
  new = RunDir(workdir).read_eval()[len(records):]
  assert sorted(r["step"] for r in new) == steps
  assert {r["settings_id"] for r in new} != {r["settings_id"] for r in records}
  assert all("short_loss" not in r and "longppl" not in r for r in new)
  assert run.eval_path.read_bytes().startswith(before)


def test_a_torn_last_line_is_skipped_and_ended_before_the_next_record(tmp_path):
  run = RunDir(tmp_path)
  run.append_eval(dict(step=1, tokens=10, settings_id="a", x=1.0))
  with open(run.eval_path, "a") as f:
    f.write('{"step": 2, "tokens": 20, "settings_id": "a", "x"')     # a crash mid-write
  assert [r["step"] for r in run.read_eval()] == [1]
  run.append_eval(dict(step=2, tokens=20, settings_id="a", x=2.0))
  assert [(r["step"], r["x"]) for r in run.read_eval()] == [(1, 1.0), (2, 2.0)]


def _cli(argv):
  try:
    return cli.main(argv), None
  except SystemExit as e:
    return e.code, e


def _snapshot(path):
  return {p: p.read_bytes() if p.is_file() else None for p in sorted(path.rglob("*"))}


@pytest.mark.parametrize("override, message", [
    ("--config.eval.tasks=no_such_task", "config.eval.tasks: unknown task 'no_such_task'"),
    ("--config.eval.lengths=8", "below the minimum length 16"),
    ("--config.eval.longppl_window=15", "config.eval.longppl_window: must be an even integer"),
    ("--config.eval.seed=-1", "config.eval.seed: must be an integer >= 0"),
    ("--config.eval.longppl_threshold=nan", "config.eval.longppl_threshold: must be a finite number"),
    ("--config.eval.depths=0.12,0.123", "config.eval.depths: must differ"),
    ("--config.model.window=4", "unknown flag --config.model.window"),
    ("--config.eval.reference=/nonexistent/run", "/nonexistent/run does not exist"),
])
def test_bad_eval_input_is_one_line_and_writes_nothing(trained, capsys, override, message):
  workdir, _ = trained
  before = _snapshot(workdir)
  code, _ = _cli(["eval", "--workdir", str(workdir), override])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2 and len(err) == 1 and message in err[0], err
  assert _snapshot(workdir) == before


def test_no_run_or_no_checkpoints_is_one_line_and_writes_nothing(tmp_path, capsys, kv_tasks):
  code, _ = _cli(["eval", "--workdir", str(tmp_path / "missing")])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2 and err == [f"hybrid-jax: error: run directory {tmp_path / 'missing'} does not exist"]
  assert not (tmp_path / "missing").exists()
  run = tmp_path / "empty"
  run.mkdir()
  (run / "config.json").write_text(json.dumps(json.loads(_small_eval(tiny_config()).to_json())))
  before = _snapshot(run)
  code, _ = _cli(["eval", "--workdir", str(run)])
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2 and len(err) == 1 and "holds no checkpoints" in err[0], err
  assert _snapshot(run) == before


def test_real_tasks_and_the_mix_are_evaluated(tmp_path, monkeypatch):
  """The data side's tasks (all of them) and its training mix's held-out text, on an
  untrained model: every key, consistent means, finite losses."""
  from hybrid_jax.data import tasks
  monkeypatch.setattr(eval_settings, "task_module", lambda: tasks)
  c = _small_eval(tiny_config(steps=1), tasks="all", lengths=(max(map(tasks.min_length, tasks.TASK_NAMES)),))
  c.data.name, c.data.n_pairs, c.data.short_len = "mix", 1, 16
  c.eval.examples, c.eval.depths, c.eval.longppl_rows, c.eval.short_rows = 2, (0.5,), 1, 2
  train(c, tmp_path / "run", progress=False)
  (record,) = evaluate_run(tmp_path / "run", log=lambda *_: None)
  assert 0 < record["short_loss"] < 10 and 0 < record["long_loss"] < 10
  length = c.eval.lengths[0]
  per_task = [record[f"retrieval_acc/{name}"] for name in tasks.TASK_NAMES]
  for name in tasks.TASK_NAMES:
    assert record[f"retrieval_acc/{name}"] == record[f"retrieval_acc/{name}/{length}/d0.50"]
    assert 0.0 <= record[f"retrieval_acc/{name}"] <= 1.0
  assert record["retrieval_acc"] == pytest.approx(np.mean(per_task))
  assert record[f"retrieval_acc_at/{length}"] == pytest.approx(np.mean(per_task))


# --- LongPPL ---------------------------------------------------------------------------

class CopyOracle:
  """A 'model' whose loss is 0 when the target token occurs earlier in the row it sees and
  5 nats otherwise: it needs long context exactly where a token repeats from far back."""

  def score(self, params, inputs_NxT, targets_NxT, rows):
    nll = np.full(inputs_NxT.shape, 5.0, np.float32)
    for i, (x, y) in enumerate(zip(inputs_NxT, targets_NxT)):
      for t in range(len(x)):
        if y[t] in x[:t + 1]:
          nll[i, t] = 0.0
    return nll, nll == 0


def _settings(**kw):
  base = dict(tasks=(), lengths=(64,), depths=(0.5,), examples=1, seed=0, batch_tokens=256,
              short_length=16, short_rows=0, longppl_length=96, longppl_rows=1,
              longppl_window=16, longppl_threshold=2.0, reference=None, reference_step=None)
  return EvalSettings(**{**base, **kw})


def test_truncated_context_is_half_to_full_window():
  k, off = truncated_index(96, 16)
  t = np.arange(96)
  seen = off + 1                                   # tokens the truncated model sees at t
  assert np.array_equal(seen[:16], t[:16] + 1)     # short positions: their whole context
  assert seen[16:].min() == 9 and seen[16:].max() == 16
  assert np.array_equal(k * 8 + off, t)            # the segment really covers position t


def test_longppl_key_tokens_are_exactly_the_far_repeats():
  """Targets that repeat a token from more than a window back are the key tokens; repeats
  from under half a window back are not (the truncated context still holds them)."""
  z = np.arange(100, 197, dtype=np.int32)          # 97 distinct tokens: nothing to copy ...
  far = {61: 5, 91: 30}                             # ... except z[t+1] = z[src], t - src > 16
  near = {41: 36, 71: 66}                           # and t - src < 8
  for i, src in {**far, **near}.items():
    z[i] = z[src]
  ev = LongPPLEval(_settings(longppl_length=96, longppl_window=16), (z[None, :-1], z[None, 1:]))
  keys = ev.key_tokens(CopyOracle(), None)[0]
  assert sorted(np.flatnonzero(keys)) == [i - 1 for i in sorted(far)]
  out = ev(CopyOracle(), None)
  assert out["longppl_key_tokens"] == 2 and out["log_longppl"] == 0.0 and out["longppl"] == 1.0
  assert out["long_loss"] == pytest.approx(5.0 * (96 - 4) / 96)   # only the 4 copies are free


def test_reference_model_fixes_the_key_tokens(trained, kv_tasks, tmp_path):
  """A pure-SWA reference (receptive field 2*(4-1) = 6 < window/2) never gains from long
  context: no key tokens, so LongPPL is undefined; the model itself finds some."""
  workdir, records = trained
  assert max(r["longppl_key_tokens"] for r in records) > 0
  c = tiny_config(pattern="S", steps=2, window=4)
  c.checkpoint.every = 1
  train(c, tmp_path / "swa", progress=False)
  code, _ = _cli(["eval", "--workdir", str(workdir), f"--config.eval.reference={tmp_path / 'swa'}",
                  "--config.eval.tasks=", "--config.eval.short_rows=0"])
  assert code == 0
  new = [r for r in RunDir(workdir).read_eval() if "short_loss" not in r and "longppl_key_tokens" in r]
  assert new and all(r["longppl_key_tokens"] == 0 and r["longppl"] is None for r in new)


# --- training with eval.every ----------------------------------------------------------

def _sigterm_at(monkeypatch, at_step):
  import hybrid_jax.data as data
  make = data.make_source

  def make_source(cfg):
    source = make(cfg)
    batch = source.batch

    def batch_then_signal(step, rows=None):
      if step == at_step:
        signal.raise_signal(signal.SIGTERM)
      return batch(step, rows)
    source.batch = batch_then_signal
    return source
  monkeypatch.setattr(data, "make_source", make_source)


def test_training_evaluates_every_k_steps_and_resumes_exactly(tmp_path, kv_tasks, monkeypatch):
  c = _small_eval(tiny_config(steps=12))
  c.eval.every, c.eval.examples, c.eval.lengths = 4, 4, (24,)
  c.eval.short_rows, c.eval.longppl_rows, c.eval.longppl_length = 2, 2, 48
  train(c, tmp_path / "a", progress=False)
  with monkeypatch.context() as mp:
    _sigterm_at(mp, 7)           # stops after step 8: checkpoint saved, eval of 8 not yet
    with pytest.raises(Preempted):
      train(c, tmp_path / "b", progress=False)
  assert [r["step"] for r in RunDir(tmp_path / "b").read_eval()] == [4]
  train(c, tmp_path / "b", progress=False)
  strip = lambda rs, drop: [{k: v for k, v in r.items() if k not in drop} for r in rs]
  a, b = (RunDir(tmp_path / d) for d in "ab")
  assert [r["step"] for r in a.read_eval()] == [4, 8, 12]
  assert strip(a.read_eval(), {"eval_seconds"}) == strip(b.read_eval(), {"eval_seconds"})
  timing = {"tokens_per_s", "input_wait"}
  assert strip(a.read_metrics(), timing) == strip(b.read_metrics(), timing)
  # The CLI then evaluates only the kept checkpoints training did not.
  assert {r["step"] for r in evaluate_run(tmp_path / "a", log=lambda *_: None)}.isdisjoint({4, 8, 12})


def test_bad_reference_fails_training_before_anything_is_written(tmp_path, kv_tasks):
  c = _small_eval(tiny_config(steps=4))
  c.eval.every, c.eval.reference = 2, str(tmp_path / "nope")
  with pytest.raises(RunDirError, match="does not exist"):
    train(c, tmp_path / "run", progress=False)
  assert not (tmp_path / "run").exists()


def test_evidence_distance_and_its_bins():
  from hybrid_jax.eval.retrieval import distance_bin, evidence_distance
  answer = np.zeros((3, 16), bool)
  evidence = np.zeros((3, 16), bool)
  answer[0, 12], evidence[0, [3, 4]] = True, True        # last evidence 4 -> answer 12: 8
  answer[1, [9, 10]], evidence[1, 8] = True, True        # adjacent: 1
  answer[2, 5] = True                                    # no evidence: 0 (left out of bins)
  np.testing.assert_array_equal(evidence_distance(answer, evidence), [8, 1, 0])
  assert [distance_bin(d) for d in (1, 2, 3, 7, 8, 63, 64)] == [
      (1, 2), (2, 4), (2, 4), (4, 8), (8, 16), (32, 64), (64, 128)]


def test_accuracy_by_distance_pools_the_depth_cells(trained):
  workdir, records = trained
  final = _by_step(records)[max(_by_step(records))]
  prefix = f"retrieval_acc_by_distance/{KV_TASK}/32/"
  bins = {k[len(prefix):]: v for k, v in final.items() if k.startswith(prefix)}
  counts = {b: final[f"retrieval_n_by_distance/{KV_TASK}/32/{b}"] for b in bins}
  assert len(bins) >= 2 and all(0 <= a <= 1 for a in bins.values())
  cells = [final[f"retrieval_acc/{KV_TASK}/32/d{d:.2f}"] for d in (0.5, 1.0)]
  pooled = sum(bins[b] * counts[b] for b in bins) / sum(counts.values())
  assert pooled == pytest.approx(np.mean(cells))       # every example lands in one bin


def test_short_loss_is_filler_only_with_the_answer_tokens_apart(trained):
  from hybrid_jax.eval.heldout import split_losses
  out = split_losses(np.array([[1.0, 3.0, 2.0], [4.0, 0.0, 2.0]]),
                     np.array([[False, True, False], [False, False, True]]))
  assert out["short_loss"] == pytest.approx(7 / 4) and out["short_answer_loss"] == pytest.approx(2.5)
  assert out["short_loss_all"] == pytest.approx(2.0) and out["short_ppl"] == pytest.approx(np.exp(1.75))
  workdir, records = trained
  final = _by_step(records)[max(_by_step(records))]
  # The all-token mean lies strictly between its two parts (answers exist and differ).
  parts = sorted([final["short_answer_loss"], final["short_loss"]])
  assert parts[0] < final["short_loss_all"] < parts[1]
