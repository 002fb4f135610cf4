"""A corpus tokenized once: stored ids decode to the tokenizer's encoding of each document,
runs refuse missing or foreign ids in one line, rows come from ids (a long row is one long
document's window, short rows pack documents), grain workers give the in-process batches
(also from a resumed step), a huge document costs what small ones do, and a dead worker is
one line."""

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import tiny_config
from hybrid_jax.configs import ConfigError
from hybrid_jax.data import corpus as C
from hybrid_jax.data import token_ids as I
from hybrid_jax.data.mix import TrainingMix
from hybrid_jax.data.pipeline import Batches, DataWorkerError
from hybrid_jax.data.text import generated_sentences
from hybrid_jax.data.tokenizer import load_tokenizer, train_bpe
from hybrid_jax.resolve import resolve


def _write(root, texts):
  root.mkdir(parents=True, exist_ok=True)
  for i, t in enumerate(texts):
    (root / f"doc{i:03d}.txt").write_text(t)


def _prose(seed, chars):
  return "".join(generated_sentences(np.random.default_rng(seed), chars)).strip()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  """20 documents, a few long (about 6K bytes) and many short, a BPE trained on them, and
  the ids of both tokenizers."""
  src = tmp_path_factory.mktemp("texts")
  _write(src, [f"Document {i}. " + _prose(i, 6000 if i % 5 == 0 else 120) for i in range(20)])
  out = tmp_path_factory.mktemp("built") / "corpus"
  C.build([str(src)], out, validation_fraction=0.2)
  corpus = C.open_corpus(out, "train")
  train_bpe((corpus[i] for i in range(len(corpus))), out, vocab_size=400)
  C.tokenize(out, str(out))                  # the BPE's ids beside the byte ones build wrote
  return out


def _cfg(corpus, tokenizer="byte", **data):
  c = tiny_config("SF", steps=6)
  c.data.name, c.data.corpus, c.data.tokenizer = "mix", str(corpus), tokenizer
  c.data.seq_len, c.data.n_pairs, c.data.short_len = 256, 4, 40
  c.model.vocab_size = None
  for k, v in data.items():
    c.data[k] = v
  return resolve(c)


def test_stored_ids_decode_to_the_tokenizers_encoding_of_each_document(corpus, tmp_path):
  """For the byte tokenizer (made by build), a BPE and a sentencepiece model."""
  from hybrid_jax.data.tokenizer import train_sentencepiece
  texts = C.open_corpus(corpus, "train")
  sp = train_sentencepiece((texts[i] for i in range(len(texts))), tmp_path, vocab_size=400)
  C.tokenize(corpus, str(sp), threads=2)
  for spec in ("byte", str(corpus), str(sp)):
    tok = load_tokenizer(spec)
    for split in C.SPLITS:
      text, ids = C.open_corpus(corpus, split), I.TokenIds(corpus, spec, split)
      assert len(ids) == len(text) > 0 and ids.eos_id == tok.eos_id
      for i in range(len(text)):
        np.testing.assert_array_equal(np.asarray(ids.doc(i), np.int32), tok.encode(text[i]))
        assert tok.decode(ids.doc(i)) == text[i]
    folder = I.ids_dir(corpus, spec)
    on_disk = sum(f.stat().st_size for f in folder.iterdir())
    n_ids = sum(json.loads((folder / I.META).read_text())["splits"][s]["tokens"] for s in C.SPLITS)
    assert on_disk <= 2 * 4 * n_ids            # at most about 2x the bytes of int32 ids


def test_a_run_without_ids_for_its_tokenizer_is_refused_naming_the_command(corpus, tmp_path):
  other = tmp_path / "other"
  other.mkdir()
  texts = C.open_corpus(corpus, "train")
  train_bpe((texts[i] for i in range(len(texts))), other, vocab_size=300)
  with pytest.raises(ConfigError) as e:
    _cfg(corpus, tokenizer=str(other))
  msg = str(e.value)
  assert msg.startswith("config.data.corpus:") and "\n" not in msg
  assert f"hybrid-jax data tokenize --data {corpus} --tokenizer {other}" in msg
  assert "ids of other tokenizers only" in msg


def test_ids_recorded_as_another_tokenizers_or_another_builds_are_refused(corpus, tmp_path):
  import shutil
  copy = tmp_path / "copy"
  shutil.copytree(corpus, copy)
  meta_path = I.ids_dir(copy, "byte") / I.META
  meta = json.loads(meta_path.read_text())
  meta_path.write_text(json.dumps(dict(meta, fingerprint="0123456789abcdef")))
  with pytest.raises(ConfigError, match="made by another tokenizer .*hybrid-jax data tokenize"):
    _cfg(copy)
  meta_path.write_text(json.dumps(dict(meta, corpus="feedfacefeedface")))
  with pytest.raises(ConfigError, match="another build of the corpus"):
    _cfg(copy)


def test_a_corpus_built_before_token_ids_is_refused_naming_the_command(corpus, tmp_path):
  import shutil
  copy = tmp_path / "old"
  shutil.copytree(corpus, copy, ignore=shutil.ignore_patterns(I.TOKENS_DIR))
  with pytest.raises(ConfigError, match=r"no token ids for tokenizer byte; make them with: "
                     r"hybrid-jax data tokenize --data \S+ --tokenizer byte"):
    _cfg(copy)


def test_tokenize_cli_writes_once_and_never_overwrites(corpus, tmp_path, capsys):
  import shutil

  from hybrid_jax import cli
  copy = tmp_path / "c"
  shutil.copytree(corpus, copy, ignore=shutil.ignore_patterns(I.TOKENS_DIR))
  assert cli.main(["data", "tokenize", "--data", str(copy), "--tokenizer", str(copy)]) == 0
  assert "train with --config.data.corpus=" in capsys.readouterr().out
  before = (I.ids_dir(copy, str(copy)) / "train.ids").read_bytes()
  assert cli.main(["data", "tokenize", "--data", str(copy), "--tokenizer", str(copy)]) == 2
  assert "exist (never overwritten" in capsys.readouterr().err
  assert (I.ids_dir(copy, str(copy)) / "train.ids").read_bytes() == before
  assert cli.main(["data", "tokenize", "--data", str(tmp_path / "nothing"), "--tokenizer", "byte"]) == 2
  assert "not a built corpus" in capsys.readouterr().err


def test_long_rows_are_one_long_documents_window_and_short_rows_pack_documents(corpus):
  cfg = _cfg(corpus, long_fraction=0.5, n_pairs=0)
  src = TrainingMix(cfg.data, batch_size=8)
  docs = [np.asarray(src.corpus.doc(i), np.int32) for i in range(len(src.corpus))]
  long_docs = [d for d in docs if len(d) >= 257]
  assert long_docs and len(long_docs) < len(docs)
  eos = src.tokenizer.eos_id
  for step in range(4):
    for r in range(8):
      tokens, _, _ = src.row(step, r)
      assert len(tokens) == 257 and tokens.dtype == np.int32
      if src.is_long(step, r):     # a contiguous window of one long document
        assert eos not in tokens
        assert any(_contains(d, tokens) for d in long_docs)
      else:                        # pieces of at most short_len tokens, each a document's slice
        pieces = np.split(tokens, np.flatnonzero(tokens == eos))
        pieces = [p[1:] if len(p) and p[0] == eos else p for p in pieces]
        assert len(pieces) > 5 and max(map(len, pieces)) <= 40
        assert all(any(_contains(d, p) for d in docs) for p in pieces[:-1] if len(p))


def _contains(doc, piece):
  n = len(piece)
  if n > len(doc):
    return False
  w = np.lib.stride_tricks.sliding_window_view(doc, n)
  return bool(np.any(np.all(w == piece, axis=1)))


def test_pairs_are_inserted_as_their_tokenized_text(corpus):
  cfg = _cfg(corpus, tokenizer=str(corpus), long_fraction=1.0, n_pairs=6)
  src = TrainingMix(cfg.data, batch_size=4)
  tok = src.tokenizer
  for r in range(4):
    tokens, answer, distances = src.row(0, r)
    assert len(distances) == 6
    values = [tok.decode(tokens[a:b]) for a, b in _runs(answer)]
    assert all(v.isdigit() and 10 <= int(v) <= 99 for v in values), values
    text = tok.decode(tokens)
    for a, b in _runs(answer):     # the key before each answer is written twice
      key = tok.decode(tokens[a - 8:a]).split(" ")[-1]
      assert key.endswith(":") and text.count(" " + key + tok.decode(tokens[a:b])) >= 2


def _runs(mask):
  edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
  return list(zip(edges[::2], edges[1::2]))


def test_workers_give_the_in_process_batches_also_from_a_resumed_step(corpus):
  cfg = _cfg(corpus)
  rows = range(1, 4)
  expected = list(Batches(cfg, 0, 9, rows, workers=0))
  for start, workers in ((0, 2), (5, 1)):
    with Batches(cfg, start, 9, rows, workers=workers, prefetch=2) as it:
      got = list(it)
    assert len(got) == 9 - start
    for a, b in zip(got, expected[start:]):
      for k in a:
        np.testing.assert_array_equal(a[k], b[k])


def test_a_killed_worker_is_a_one_line_error_not_a_hang(corpus):
  cfg = _cfg(corpus)
  before = set(_children())
  with Batches(cfg, 0, 10_000, range(4), workers=2, prefetch=1) as it:
    next(it)
    workers = [p for p in _children() if p not in before]
    assert workers
    os.kill(workers[0], signal.SIGKILL)
    t0 = time.monotonic()
    with pytest.raises(DataWorkerError) as e:
      for _ in range(10_000):
        next(it)
  assert time.monotonic() - t0 < 60
  assert "worker process died" in str(e.value) and "\n" not in str(e.value)


def test_workers_run_below_the_trainers_priority(corpus):
  """Where workers share cores with the trainer (a CPU run, a small host) its step comes
  first: the workers are niced by ``WORKER_NICE`` relative to the trainer."""
  from hybrid_jax.data.pipeline import WORKER_NICE
  before = set(_children())
  with Batches(_cfg(corpus), 0, 10_000, range(4), workers=2, prefetch=1) as it:
    next(it)
    workers = [p for p in _children() if p not in before]
    assert workers
    own, want = os.getpriority(os.PRIO_PROCESS, 0), [min(os.getpriority(os.PRIO_PROCESS, 0) + WORKER_NICE, 19)] * len(workers)
    deadline = time.monotonic() + 30               # a worker still starting has not niced yet
    while time.monotonic() < deadline and [os.getpriority(os.PRIO_PROCESS, w) for w in workers] != want:
      time.sleep(0.1)
    assert [os.getpriority(os.PRIO_PROCESS, w) for w in workers] == want, own


def _children():
  import multiprocessing
  return [p.pid for p in multiprocessing.active_children()]


def test_a_single_huge_document_costs_no_more_than_many_small_ones(tmp_path):
  """The same ~4 MB of text as one document and as 40: rows from either cost about the same
  (the text path read and cut the whole huge document for every row: ~40x slower)."""
  text = _prose(0, 4_000_000)
  size = len(text) // 40
  parts = [text[i * size:(i + 1) * size] for i in range(40)]
  small = [f"Small document {i}. " + _prose(100 + i, 200) for i in range(10)]
  huge = next(f"huge{k}.txt" for k in range(100) if C.split_of(f"huge{k}.txt", 0.3) == "train")
  _write(tmp_path / "one", small)
  (tmp_path / "one" / huge).write_text(text)
  _write(tmp_path / "many", parts + small)
  seconds = {}
  for name, frac in (("one", 0.5), ("many", 0.5)):
    C.build([str(tmp_path / name)], tmp_path / f"built_{name}", validation_fraction=0.3)
    c = tiny_config()
    c.data.name, c.data.corpus, c.data.seq_len = "mix", str(tmp_path / f"built_{name}"), 2048
    c.data.n_pairs, c.data.short_len, c.data.long_fraction = 8, 256, frac
    src = TrainingMix(resolve(c).data, batch_size=8)
    src.batch(0)
    t0 = time.perf_counter()
    for s in range(1, 6):
      src.batch(s)
    seconds[name] = time.perf_counter() - t0
  assert seconds["one"] < 3 * seconds["many"] + 0.05, seconds


# --- the loop with workers ------------------------------------------------------------------

class _SignalAt:
  """A hook that sends this process SIGTERM at a logged step, as a preemption would."""

  def __init__(self, step):
    self.at = step

  def __getattr__(self, name):           # every other hook method does nothing
    return lambda *a, **k: None

  def log(self, step, record):
    if step == self.at:
      signal.raise_signal(signal.SIGTERM)


def test_training_with_workers_gives_the_in_process_losses_and_resumes_after_sigterm(corpus, tmp_path):
  from hybrid_jax.run import RunDir
  from hybrid_jax.train import loop
  from hybrid_jax.train.loop import Preempted
  cfg = lambda workers: _cfg(corpus, workers=workers, prefetch=2)
  loop.train(cfg(0), tmp_path / "w0", progress=False)
  loop.train(cfg(2), tmp_path / "w2", progress=False)
  with pytest.raises(Preempted):
    loop.train(cfg(2), tmp_path / "stopped", progress=False, hooks=(_SignalAt(3),))
  assert RunDir(tmp_path / "stopped").read_status()["state"] == "preempted"
  loop.train(cfg(1), tmp_path / "stopped", progress=False)    # workers may change on resume
  losses = {d: [r["loss"] for r in RunDir(tmp_path / d).read_metrics()] for d in ("w0", "w2", "stopped")}
  assert len(losses["w0"]) == 6
  assert losses["w0"] == losses["w2"] == losses["stopped"]
  assert all(0 <= r["input_wait"] <= 1 for r in RunDir(tmp_path / "w2").read_metrics())


HOLD_WORKERS = """
import multiprocessing, sys, time
from hybrid_jax.data.pipeline import Batches
from hybrid_jax.resolve import resolve
from conftest import tiny_config

if __name__ == "__main__":
  c = tiny_config()
  c.data.name, c.data.corpus, c.data.short_len, c.data.n_pairs = "mix", sys.argv[1], 16, 1
  it = Batches(resolve(c), 0, 1000, range(4), workers=2, prefetch=1)
  next(it)
  deadline = time.time() + 60          # the workers start one after the other
  while len(multiprocessing.active_children()) < 2 and time.time() < deadline:
    time.sleep(0.2)
  print(" ".join(str(p.pid) for p in multiprocessing.active_children()), flush=True)
  time.sleep(600)
"""


def test_workers_exit_when_the_trainer_is_killed(corpus, tmp_path):
  import subprocess
  import sys
  script = tmp_path / "hold.py"
  script.write_text(HOLD_WORKERS)
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent),
                                                     os.environ.get("PYTHONPATH", "")]))
  proc = subprocess.Popen([sys.executable, str(script), str(corpus)], stdout=subprocess.PIPE,
                          text=True, env=env)
  pids = [int(p) for p in proc.stdout.readline().split()]
  assert len(pids) >= 2
  proc.kill()
  proc.wait()
  deadline = time.monotonic() + 20
  while time.monotonic() < deadline and any(_alive(p) for p in pids):
    time.sleep(0.2)
  assert not any(_alive(p) for p in pids)


def _alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  with open(f"/proc/{pid}/stat") as f:          # a zombie is gone, only not yet reaped
    return f.read().split()[2] != "Z"
