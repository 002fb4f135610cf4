"""Hugging Face export checked against the real transformers classes (torch on CPU): logits
of every exportable pattern within 1e-4 (float32) past the window for a randomly initialised
model, and of a trained toy run of each transformers class; greedy generation equal to
hybrid_jax's own decoding; the tokenizer travels with the export; bad input fails in one line
before anything is written."""

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the hf test extra (pip install -e '.[hf]') is not installed")
transformers = pytest.importorskip("transformers", reason="the hf test extra is not installed")

from conftest import tiny_config                      # noqa: E402
from hybrid_jax import cli, load_run                   # noqa: E402
from hybrid_jax.resolve import resolve                 # noqa: E402
from hybrid_jax.export.hf import GRANITE, QWEN3NEXT, SMOLLM3, save_hf  # noqa: E402
from hybrid_jax.generate import greedy_generate        # noqa: E402
from hybrid_jax.model.lm import build_model            # noqa: E402
from hybrid_jax.standard_run import train                # noqa: E402

LENGTH = 40          # > model.window = 8 of tiny_config: the windowed layers cut context
CASES = {            # id: (pattern, model overrides, class)
    "SF-rope-tied": ("SF", {}, SMOLLM3),
    "SF-nope_full-untied": ("SF", dict(pos_full="nope", tie_embeddings=False), SMOLLM3),
    "SSSF-nope_swa": ("SSSF", dict(n_layers=4, pos_swa="nope"), SMOLLM3),
    "MF-rope-tied": ("MF", {}, GRANITE),
    "MF-nope-untied": ("MF", dict(pos_full="nope", tie_embeddings=False), GRANITE),
    "G-untied": ("G", dict(tie_embeddings=False), QWEN3NEXT),
}


def _load_hf(path, expected_class):
  model, info = transformers.AutoModelForCausalLM.from_pretrained(path, output_loading_info=True)
  assert type(model).__name__ == expected_class
  assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
  return model.eval()


def _max_logit_diff(model, hf_model, vocab):
  tokens = np.random.default_rng(0).integers(0, vocab, (2, LENGTH))
  ours = np.asarray(model(tokens))
  with torch.no_grad():
    theirs = hf_model(torch.tensor(tokens)).logits.numpy()
  assert ours.dtype == theirs.dtype == np.float32 and ours.shape == theirs.shape
  return float(np.abs(ours - theirs).max())


@pytest.mark.parametrize("case", CASES)
def test_random_init_export_matches_transformers_logits_and_greedy_generation(case, tmp_path):
  pattern, overrides, cls = CASES[case]
  cfg = resolve(tiny_config(pattern, **overrides))
  model = build_model(cfg.model, 7)
  out = save_hf(model, cfg, tmp_path / "hf")
  hf_model = _load_hf(out, cls)
  assert _max_logit_diff(model, hf_model, cfg.model.vocab_size) <= 1e-4
  prompt = np.random.default_rng(1).integers(1, cfg.model.vocab_size, (2, 8))
  ours = greedy_generate(model, prompt, 32)
  with torch.no_grad():
    theirs = hf_model.generate(torch.tensor(prompt), max_new_tokens=32, do_sample=False,
                               eos_token_id=None, pad_token_id=0).numpy()
  assert theirs.shape == ours.shape == (2, 40)
  np.testing.assert_array_equal(theirs, ours)


# A trained run per transformers class (trained norm scales and biases leave their init values,
# so a convention the random init cannot tell apart shows); every pattern: the test above.
TRAINED = ("SF-rope-tied", "MF-nope-untied", "G-untied")


@pytest.fixture(scope="module")
def trained_runs(tmp_path_factory):
  runs = {}
  for case in TRAINED:
    pattern, overrides, _ = CASES[case]
    workdir = tmp_path_factory.mktemp(case) / "run"
    train(tiny_config(pattern, steps=4, **overrides), workdir, progress=False)
    runs[case] = workdir
  return runs


@pytest.mark.parametrize("case", TRAINED)
def test_trained_run_exports_through_the_cli_and_matches_transformers(case, trained_runs, tmp_path):
  workdir = trained_runs[case]
  out = tmp_path / "hf"
  cli.main(["export", "hf", "--workdir", str(workdir), "--out", str(out)])
  cfg, model = load_run(workdir)
  hf_model = _load_hf(out, CASES[case][2])
  assert _max_logit_diff(model, hf_model, cfg.model.vocab_size) <= 1e-4
  # the byte tokenizer travels with it: AutoTokenizer gives hybrid_jax's ids
  from hybrid_jax.data.tokenizer import ByteTokenizer
  tok = transformers.AutoTokenizer.from_pretrained(out)
  text = "héllo wörld\x00 KV 12: ok"
  assert tok(text).input_ids == ByteTokenizer().encode(text).tolist()
  assert tok.decode(ByteTokenizer().encode(text)) == text


def _error_line(capsys, argv):
  assert cli.main(argv) == 2
  err = capsys.readouterr().err.strip()
  assert err.count("\n") == 0, err
  return err


@pytest.mark.parametrize("pattern,overrides,says", [
    ("HF", {}, "head-wise"), ("GF", {}, "Qwen3-Next"), ("SG", {}, "Qwen3-Next"), ("LF", {}, "MiniMax"),
    ("MS", {}, "sliding-window")])
def test_unsupported_pattern_is_refused_in_one_line(pattern, overrides, says, tmp_path, capsys):
  run = tmp_path / "run"
  run.mkdir()
  (run / "config.json").write_text(resolve(tiny_config(pattern, **overrides)).to_json())
  err = _error_line(capsys, ["export", "hf", "--workdir", str(run), "--out", str(tmp_path / "o")])
  assert f"pattern {pattern!r}" in err.replace('"', "'") and says in err
  assert not (tmp_path / "o").exists()


def test_missing_step_and_existing_out_are_refused_in_one_line(trained_runs, tmp_path, capsys):
  workdir = trained_runs["SF-rope-tied"]
  err = _error_line(capsys, ["export", "hf", "--workdir", str(workdir), "--step", "999",
                             "--out", str(tmp_path / "o")])
  assert "no checkpoint at step 999" in err and not (tmp_path / "o").exists()
  keep = tmp_path / "keep"
  keep.mkdir()
  (keep / "x").write_text("mine")
  err = _error_line(capsys, ["export", "hf", "--workdir", str(workdir), "--out", str(keep)])
  assert "never overwritten" in err and (keep / "x").read_text() == "mine"
