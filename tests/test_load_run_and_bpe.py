"""``hybrid_jax.load_run`` (parameters only, latest or a named step, one-line errors) and the
Hugging Face tokenizer path: a byte-level BPE trains on a built corpus, its vocabulary flows
into the model config, its file is in the data fingerprint, a toy run trains on it and its
export carries it."""

import json

import numpy as np
import pytest

from conftest import tiny_config
from hybrid_jax import load_run
from hybrid_jax.configs import ConfigError
from hybrid_jax.resolve import resolve
from hybrid_jax.data import corpus as C
from hybrid_jax import cli
from hybrid_jax.commands.data import main as data_main
from hybrid_jax.data.text import generated_sentences
from hybrid_jax.data.tokenizer import HFTokenizer, load_tokenizer
from hybrid_jax.eval.checkpoints import RunModels
from hybrid_jax.loading import LoadError
from hybrid_jax.standard_run import train


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("run") / "r"
  train(tiny_config("SF", steps=4), workdir, progress=False)
  return workdir


def test_load_run_gives_the_checkpoint_model_as_float32_logits(run):
  cfg, model = load_run(run)
  assert cfg.model.pattern == "SF" and cfg.derived.steps == 4
  tokens = np.random.default_rng(0).integers(0, cfg.model.vocab_size, (2, 16))
  logits = np.asarray(model(tokens))
  assert logits.shape == (2, 16, cfg.model.vocab_size) and logits.dtype == np.float32
  models = RunModels(run)   # the evaluator's restore of the same step: the same parameters
  try:
    from flax import nnx
    for step in (models.steps[0], models.steps[-1]):
      _, m = load_run(run, step)
      ref = models.params(step)
      for a, b in zip(nnx.to_flat_state(nnx.state(m, nnx.Param)), nnx.to_flat_state(ref)):
        np.testing.assert_array_equal(np.asarray(a[1][...]), np.asarray(b[1][...]))
  finally:
    models.close()
  _, first = load_run(run, models.steps[0])
  assert not np.array_equal(np.asarray(first(tokens)), logits)   # a step is really chosen


def test_load_run_missing_step_or_run_is_one_line(run, tmp_path):
  with pytest.raises(LoadError, match=r"no checkpoint at step 999 \(it has .*4\)$"):
    load_run(run, 999)
  with pytest.raises(LoadError, match="does not exist"):
    load_run(tmp_path / "nothing")


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
  src = tmp_path_factory.mktemp("texts")
  rng = np.random.default_rng(0)
  for i in range(12):
    (src / f"doc{i}.txt").write_text(f"Document {i}. " + "".join(generated_sentences(rng, 400)))
  out = tmp_path_factory.mktemp("built") / "corpus"
  C.build([str(src)], out, validation_fraction=0.2)
  return out


def test_bpe_trains_round_trips_and_refuses_bad_sizes(corpus_dir, capsys):
  assert data_main(["tokenizer", "train", "--corpus", str(corpus_dir), "--vocab-size", "400"]) == 0
  tok = load_tokenizer(str(corpus_dir))
  assert isinstance(tok, HFTokenizer) and 300 < tok.vocab_size <= 400 and tok.eos_id == 0
  text = "Document 3. héllo\n\n  wörld: 42"
  ids = tok.encode(text)
  assert tok.decode(ids) == text and len(ids) < len(text.encode())   # merges were learnt
  flat, lengths = tok.encode_units(["Docu", "ment 3"])
  assert tok.decode(flat[:lengths[0]]) == "Docu" and lengths.sum() == len(flat)
  for argv, says in [(["--vocab-size", "100"], "must be in [257"),
                     (["--vocab-size", "400"], "exists (never overwritten")]:
    assert cli.main(["data", "tokenizer", "train", "--corpus", str(corpus_dir)] + argv) == 2
    err = capsys.readouterr().err.strip()
    assert says in err and "\n" not in err


def test_bpe_vocab_flows_into_config_and_fingerprint_covers_the_file(corpus_dir, tmp_path):
  tokfile = corpus_dir / "tokenizer.json"
  c = tiny_config("SF")
  c.data.tokenizer = str(corpus_dir)
  c.model.vocab_size = None
  cfg = resolve(c)
  assert cfg.model.vocab_size == load_tokenizer(str(corpus_dir)).vocab_size
  c.model.vocab_size = 300          # below the tokenizer's vocabulary: one line naming the field
  with pytest.raises(ConfigError, match=r"model.vocab_size.*>= the tokenizer's vocabulary"):
    resolve(c)
  copy = tmp_path / "tokenizer.json"
  copy.write_bytes(tokfile.read_bytes())
  c.model.vocab_size = None
  c.data.tokenizer = str(copy)
  before = resolve(c).derived.data_fingerprint
  data = json.loads(copy.read_text())
  data["added_tokens"][0]["content"] = "<|eot|>"     # a changed tokenizer file
  copy.write_text(json.dumps(data))
  assert resolve(c).derived.data_fingerprint != before


def test_bpe_toy_run_trains_and_exports_with_its_tokenizer(corpus_dir, tmp_path):
  transformers = pytest.importorskip("transformers", reason="the hf test extra is not installed")
  torch = pytest.importorskip("torch", reason="the hf test extra is not installed")
  from hybrid_jax import cli
  c = tiny_config("SF", steps=4)
  assert cli.main(["data", "tokenize", "--data", str(corpus_dir), "--tokenizer", str(corpus_dir)]) == 0
  c.data.name, c.data.corpus, c.data.tokenizer = "mix", str(corpus_dir), str(corpus_dir)
  c.data.n_pairs, c.data.short_len = 1, 16
  c.model.vocab_size = None
  workdir = tmp_path / "run"
  status = train(c, workdir, progress=False)
  assert status["state"] == "done"
  out = tmp_path / "hf"
  cli.main(["export", "hf", "--workdir", str(workdir), "--out", str(out)])
  cfg, model = load_run(workdir)
  tok = transformers.AutoTokenizer.from_pretrained(out)
  ours = load_tokenizer(str(corpus_dir))
  text = "Document 5. The quick brown fox:\n  42"
  assert tok(text).input_ids == ours.encode(text).tolist() and tok.eos_token_id == ours.eos_id
  hf_model = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
  ids = ours.encode(text)[None]
  with torch.no_grad():
    theirs = hf_model(torch.tensor(ids)).logits.numpy()
  assert hf_model.config.vocab_size == cfg.model.vocab_size == ours.vocab_size
  assert np.abs(np.asarray(model(ids)) - theirs).max() <= 1e-4


def test_export_refuses_a_sentencepiece_tokenizer_in_one_line(corpus_dir, tmp_path, capsys):
  pytest.importorskip("safetensors", reason="the hf test extra is not installed")
  from hybrid_jax import cli
  from hybrid_jax.data.tokenizer import train_sentencepiece
  corpus = C.open_corpus(corpus_dir, "train")
  model_file = train_sentencepiece((corpus[i] for i in range(len(corpus))), tmp_path, vocab_size=400)
  c = tiny_config("SF")
  c.data.tokenizer, c.model.vocab_size = str(model_file), None
  run = tmp_path / "run"
  run.mkdir()
  (run / "config.json").write_text(resolve(c).to_json())
  assert cli.main(["export", "hf", "--workdir", str(run), "--out", str(tmp_path / "hf")]) == 2
  err = capsys.readouterr().err.strip()
  assert "sentencepiece models are not exported" in err and "\n" not in err
  assert not (tmp_path / "hf").exists()
