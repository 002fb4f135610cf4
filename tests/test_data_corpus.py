"""The corpus builder (tfds, array_record, no TensorFlow), its one-line refusals, the
sentencepiece tokenizer stored with the data, and the reST-to-prose cleaning."""

import json
import re

import numpy as np
import pytest

from hybrid_jax.configs import ConfigError

from hybrid_jax.resolve import resolve
from hybrid_jax.data import corpus as C
from hybrid_jax.data import tasks
from hybrid_jax.data.text import generated_sentences
from hybrid_jax.data.tokenizer import load_tokenizer

from conftest import tiny_config


def data_main(argv):
  """``hybrid-jax data ...``; a user error (exit 2, one line) raises SystemExit."""
  from hybrid_jax import cli
  code = cli.main(["data", *argv])
  if code:
    raise SystemExit(code)
  return code


def write_texts(root, n=40):
  """``n`` documents of English-like prose as .txt/.md, plus a file that is not text."""
  rng = np.random.default_rng(0)
  docs = {}
  for i in range(n):
    name = f"sub/doc{i:02d}.md" if i % 5 == 0 else f"doc{i:02d}.txt"
    text = f"Document {i}." + "".join(generated_sentences(rng, 1500))
    (root / name).parent.mkdir(parents=True, exist_ok=True)
    (root / name).write_text(text + "\n\n\n\n")
    docs[name] = text
  (root / "notes.py").write_text("print('not a text file')\n")
  return docs


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  src = tmp_path_factory.mktemp("texts")
  docs = write_texts(src)
  out = tmp_path_factory.mktemp("built") / "corpus"
  manifest = C.build([str(src)], out, validation_fraction=0.2)
  return docs, out, manifest


def test_build_round_trips_every_document_into_disjoint_splits(built):
  docs, out, manifest = built
  seen = {}
  for split in C.SPLITS:
    corpus = C.open_corpus(out, split)
    assert len(corpus) == manifest["documents"][split] > 0
    for i in range(len(corpus)):
      assert corpus.id(i) not in seen
      seen[corpus.id(i)] = corpus[i]
      assert C.split_of(corpus.id(i), 0.2) == split
  assert seen == docs                                       # every document, cleaned, once
  assert json.loads((out / C.MANIFEST).read_text())["documents"] == manifest["documents"]
  assert not list(out.parent.glob(".*building*"))           # no temporary left behind


def test_a_directory_without_text_fails_in_one_line_and_writes_nothing(tmp_path):
  empty = tmp_path / "empty"
  (empty / "sub").mkdir(parents=True)
  (empty / "code.py").write_text("x = 1\n")
  (empty / "blank.txt").write_text("  \n\n")
  out = tmp_path / "out"
  with pytest.raises(C.CorpusError, match=r"^source .*: no non-empty \.txt/\.md text files \(0 \.txt/\.md files are not UTF-8 text, 1 are empty, 1 files have other suffixes\)$"):
    C.build([str(empty)], out)
  assert not out.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["empty"]
  with pytest.raises(C.CorpusError, match="^source .*: not a directory"):
    C.build([str(tmp_path / "missing")], out)
  assert not out.exists()


def test_an_existing_corpus_is_never_overwritten(built, capsys):
  docs, out, _ = built
  before = sorted(p.relative_to(out) for p in out.rglob("*"))
  src = out.parent.parent / "other"
  src.mkdir(exist_ok=True)
  (src / "a.txt").write_text("Some text.")
  with pytest.raises(SystemExit) as e:
    data_main(["build", "--source", str(src), "--out", str(out)])
  assert e.value.code == 2
  err = capsys.readouterr().err.strip()
  assert "\n" not in err and "exists and is not empty" in err
  assert sorted(p.relative_to(out) for p in out.rglob("*")) == before


def test_build_reports_the_empty_and_non_text_files_it_skipped(tmp_path, capsys):
  src = tmp_path / "src"
  write_texts(src, n=12)
  (src / "blank.txt").write_text(" \n\n\t\n")
  (src / "sub" / "empty.md").write_text("")
  (src / "image.txt").write_bytes(b"\x89PNG\x00\x01")
  data_main(["build", "--source", str(src), "--out", str(tmp_path / "out"),
             "--validation-fraction", "0.3"])
  line = capsys.readouterr().out.strip()
  assert line.endswith("; skipped 1 .txt/.md files that are not UTF-8 text; skipped 2 empty "
                       ".txt/.md files"), line
  manifest = json.loads((tmp_path / "out" / C.MANIFEST).read_text())
  assert (manifest["skipped_non_text_files"], manifest["skipped_empty_files"]) == (1, 2)
  assert sum(manifest["documents"].values()) == 12


def test_documents_that_do_not_fill_both_splits_are_one_line_naming_the_flag(tmp_path, capsys):
  src = tmp_path / "src"
  write_texts(src, n=1)
  with pytest.raises(SystemExit) as e:
    data_main(["build", "--source", str(src), "--out", str(tmp_path / "out")])
  err = capsys.readouterr().err.strip()
  assert e.value.code == 2 and "\n" not in err, err
  assert "1 document(s) do not fill both splits at --validation-fraction 0.05" in err
  assert err.endswith("add text or change --validation-fraction")
  assert not (tmp_path / "out").exists()


def test_a_catalog_dataset_that_cannot_be_built_fails_in_one_line(tmp_path):
  out = tmp_path / "out"
  with pytest.raises(C.CorpusError) as e:
    C.build(["tfds:no_such_dataset_hybrid_jax"], out)
  assert str(e.value).startswith("source tfds:no_such_dataset_hybrid_jax: cannot build")
  assert "\n" not in str(e.value) and not out.exists()


def test_opening_a_directory_that_is_not_a_corpus_fails_in_one_line(tmp_path):
  with pytest.raises(C.CorpusError, match=r"^corpus .*: not a built corpus \(no corpus.json"):
    C.open_corpus(tmp_path, "train")


def test_sentencepiece_tokenizer_is_trained_stored_with_the_data_and_round_trips(built, capsys):
  _, out, _ = built
  assert data_main(["tokenizer", "--data", str(out), "--vocab-size", "400"]) == 0
  model = out / "tokenizer.model"
  tok = load_tokenizer(str(out))
  assert 259 < tok.vocab_size <= 400
  validation = C.open_corpus(out, "validation")
  for i in range(len(validation)):
    ids = tok.encode(validation[i])
    assert len(ids) < len(validation[i].encode())          # it compresses
    assert tok.decode(ids) == validation[i]
  weird = "naïve café — 東京\n\n\tend"
  assert tok.decode(tok.encode(weird)) == weird             # byte fallback
  # never overwritten
  stamp = model.read_bytes()
  with pytest.raises(SystemExit):
    data_main(["tokenizer", "--data", str(out)])
  assert "exists" in capsys.readouterr().err and model.read_bytes() == stamp
  # tasks with this tokenizer: exact length, answers at the recorded positions
  for name in ("niah_multiquery", "variable_tracking", "mqar"):
    ex = tasks.make_example(name, length=900, depth=0.5, seed=0, index=1, tokenizer=tok,
                            corpus=validation)
    assert len(ex.tokens) == 900 and ex.answer_positions.max() == 899
    answers = tok.decode(ex.tokens[ex.answer_positions]).replace(" ", "")
    assert sorted(answers) == sorted(tok.decode(ex.tokens[ex.evidence_positions]).replace(" ", ""))
  # the config names it; the model's vocabulary must hold it
  c = tiny_config()
  c.data.tokenizer = str(out)
  c.model.vocab_size = tok.vocab_size
  resolve(c)
  c.model.vocab_size = tok.vocab_size - 1
  with pytest.raises(ConfigError, match=r"^config.model.vocab_size: must be >= the tokenizer's vocabulary"):
    resolve(c)
  c.data.tokenizer = str(out / "missing.model")
  with pytest.raises(ConfigError, match=r"^config.data.tokenizer: must be 'byte' or a sentencepiece model"):
    resolve(c)


RST = """
.. _label:

Title of the page
=================

Python's :func:`len` returns the **size** of a ``list``; see :ref:`the tutorial <tut-x>`
and `the site <https://example.org>`_. For example::

   >>> len([1, 2])
   2

.. note::
   A note worth *keeping*.

.. code-block:: python

   print("dropped")

.. index:: single: dropped

Last paragraph.
"""


def test_rst_markup_and_code_are_stripped_and_prose_kept():
  from hybrid_jax.data.rst import rst_to_text
  text = rst_to_text(RST)
  assert text.split("\n\n") == [
      "Title of the page",
      "Python's len returns the size of a list; see the tutorial and the site. For example:",
      "A note worth keeping.", "Last paragraph."]


def test_the_python_documentation_corpus_is_real_prose():
  try:
    C.python_docs_dir()
  except C.CorpusError as e:
    pytest.skip(f"the default corpus is not installed here: {e}")
  total, markup = 0, 0
  for doc_id, text in C.python_docs_documents():
    total += len(text)
    markup += len(re.findall(r":\w+:`|^\.\. \w+::|^>>> ", text, flags=re.M))
  assert total > 5_000_000 and markup < total / 100_000


def test_task_inputs_are_the_runs_tokenizer_and_validation_split(built):
  from hybrid_jax.data import task_inputs
  from hybrid_jax.data.tokenizer import ByteTokenizer
  _, out, manifest = built
  c = tiny_config()
  tokenizer, corpus = task_inputs(c.data)
  assert isinstance(tokenizer, ByteTokenizer) and corpus is None
  c.data.corpus = str(out)
  tokenizer, corpus = task_inputs(c.data)
  assert corpus.split == "validation" and len(corpus) == manifest["documents"]["validation"]


def test_max_documents_caps_the_documents_of_all_sources_together(tmp_path):
  for name in ("a", "b"):
    write_texts(tmp_path / name, n=12)
  manifest = C.build([str(tmp_path / "a"), str(tmp_path / "b")], tmp_path / "out",
                     validation_fraction=0.3, max_documents=15)
  splits = {s: len(C.open_corpus(tmp_path / "out", s)) for s in ("train", "validation")}
  assert sum(splits.values()) == 15, (splits, manifest)


def test_a_rebuilt_corpus_changes_the_resolved_config(built, tmp_path):
  """derived.data_fingerprint follows the corpus files, so a resumed run whose corpus was
  rebuilt differently is refused (config.json differs) instead of training on other data."""
  import shutil
  _, out, _ = built
  c = tiny_config()
  c.data.name, c.data.seq_len, c.data.n_pairs = "mix", 64, 1
  assert "data_fingerprint" not in resolve(c).derived             # byte tokens, generated prose
  copy = tmp_path / "corpus"
  shutil.copytree(out, copy)
  c.data.corpus = str(copy)
  first = resolve(c).derived.data_fingerprint
  assert resolve(c).derived.data_fingerprint == first            # deterministic
  manifest = json.loads((copy / C.MANIFEST).read_text())
  manifest["documents"]["train"] += 1
  (copy / C.MANIFEST).write_text(json.dumps(manifest))
  with pytest.raises(ConfigError, match="made from another build of the corpus"):
    resolve(c)                                                    # its ids are stale
  shutil.rmtree(copy / "tokens")
  C.tokenize(copy, "byte")
  assert resolve(c).derived.data_fingerprint != first
