"""Mechanism analyses: on a hand-built retrieval model the retrieval head is found and is the
one the answer depends on; the partial attention rows equal a dense reference; constraints,
gradient influence and probes behave as the architecture dictates; the CLI writes its
outputs and refuses bad input in one line."""

import json
import shutil

import jax
import jax.numpy as jnp
from flax import nnx
import numpy as np
import pytest
from scipy.optimize import check_grad

from conftest import tiny_config
from hybrid_jax import cli
from hybrid_jax.analysis.mechanism import ablate, constrain, gradient, heads, probe
from hybrid_jax.analysis.mechanism import forward as F
from hybrid_jax.resolve import resolve
from hybrid_jax.data.tasks import Example
from hybrid_jax.run import checkpoint_steps
from hybrid_jax.model.lm import build_model

# --- a hand-built model whose retrieval head is known --------------------------------------

VOCAB, QUERY, VALUES = 16, 4, range(8, 16)     # filler tokens 0..3, the query marker, values
RETRIEVER, COPIER = 0, 1                          # head 0 retrieves; head 1 copies filler away


def _set(param, array):
  param[...] = jnp.asarray(array, jnp.float32)


def retrieval_model(beta=2.0, alpha=0.5):
  """One NoPE full-attention layer, one-hot embeddings (d = 32), no MLP. Head 0's q at the
  query marker matches the k of value tokens with logit ~ beta * 32 / sqrt(8): it reads the
  needle's value and writes it where the tied unembedding predicts it. Head 1 attends
  uniformly (q = 0) and writes filler into residual dims the unembedding ignores; heads 2
  and 3 are all zero. Without head 0 the model predicts the query marker itself."""
  c = tiny_config("F", n_layers=1, n_heads=4, n_kv_heads=4, d_model=32, pos_full="nope")
  model = build_model(resolve(c).model, 0)
  d, dh = 32, 8
  mixer = model.blocks[0].mixer
  embed = np.eye(c.model.vocab_size, d)
  embed[VOCAB:] = 0                                 # only the 16 tokens used have embeddings
  _set(model.embed.embedding, embed)
  wq, wk, wv = (np.zeros((d, 4 * dh)) for _ in range(3))
  wo = np.zeros((4 * dh, d))
  wq[QUERY, RETRIEVER * dh] = beta
  for j, v in enumerate(VALUES):
    wk[v, RETRIEVER * dh] = 1.0
    wv[v, RETRIEVER * dh + j] = 1.0
    wo[RETRIEVER * dh + j, v] = alpha
  for j in range(4):                                # head 1: filler -> dims 16..19
    wv[j, COPIER * dh + j] = 1.0
    wo[COPIER * dh + j, 16 + j] = 1.0
  for p, w in zip((mixer.q_proj, mixer.k_proj, mixer.v_proj, mixer.o_proj), (wq, wk, wv, wo)):
    _set(p.kernel, w)
  _set(model.blocks[0].mlp.down.kernel, np.zeros_like(model.blocks[0].mlp.down.kernel[...]))
  return model


def retrieval_examples(n=6, t=24, seed=0):
  """Filler, one needle value at a random place, then ``QUERY value`` at the end."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    tokens = rng.integers(0, 4, t).astype(np.int32)
    e = int(rng.integers(4, t - 3))
    v = VALUES[i % len(VALUES)]
    tokens[e], tokens[-2], tokens[-1] = v, QUERY, v
    out.append(Example(tokens, np.array([t - 1]), np.array([e]), e / t, -1))
  return out


def test_retrieval_head_ranked_first_with_score_one_and_copy_one():
  model, examples = retrieval_model(), retrieval_examples()
  s = heads.head_scores(model, examples)
  assert heads.top_heads(s, 1) == [(0, RETRIEVER)]
  assert s["mass"][0, RETRIEVER] == pytest.approx(1.0, abs=1e-4)
  assert s["copy"][0, RETRIEVER] == pytest.approx(1.0)
  others = [h for h in range(4) if h != RETRIEVER]
  assert np.all(s["mass"][0, others] < 0.1) and np.all(s["copy"][0, others] == 0)


def test_ablating_the_retrieval_head_breaks_retrieval_another_head_does_not():
  model, examples = retrieval_model(), retrieval_examples()
  for mode in ("zero", "mean"):
    res = ablate.ablation(model, examples, [(0, RETRIEVER)], mode=mode, seed=0)
    assert res["acc"]["none"] == 1.0
    assert res["acc"]["top"] == 0.0, mode
    assert res["acc"]["control"] == 1.0, (mode, res["control_heads"])
    assert res["control_heads"][0][1] != RETRIEVER


def test_uniform_attention_row_has_entropy_log_keys():
  model, examples = retrieval_model(), retrieval_examples(n=2, t=24)
  s = heads.head_scores(model, examples)
  zero_head = 2                                     # q = 0: uniform over the i + 1 keys
  rows = np.arange(24 - heads.ENTROPY_ROWS, 24)
  assert s["entropy"][0, zero_head] == pytest.approx(np.mean(np.log(rows + 1)), rel=1e-5)
  assert s["norm_entropy"][0, zero_head] == pytest.approx(1.0, rel=1e-5)
  # head 0 is peaked (entropy ~0) only at the query row T-2; q = 0 elsewhere: uniform
  assert s["norm_entropy"][0, RETRIEVER] == pytest.approx(0.75, abs=1e-3)


# --- the partial attention rows against a dense reference -----------------------------------

def _dense_probs(mixer, h_BxTxD, windows_H):
  """Every row of every head's attention matrix, from the module's own q/k/v projections."""
  q, k, v = mixer.qkv(h_BxTxD)
  group = mixer.n_heads // mixer.n_kv_heads
  k, v = jnp.repeat(k, group, axis=2), jnp.repeat(v, group, axis=2)
  s = jnp.einsum("bihd,bjhd->bhij", q, k) * mixer.head_dim ** -0.5
  t = h_BxTxD.shape[1]
  i, j = np.arange(t)[:, None], np.arange(t)[None, :]
  mask = np.stack([(j <= i) & (j > i - w) for w in windows_H])          # [H, T, T]
  p = jax.nn.softmax(jnp.where(mask[None], s, -jnp.inf), axis=-1)
  return p, jnp.einsum("bhij,bjhd->bihd", p, v)


def test_attention_rows_equal_dense_attention_matrix_rows():
  c = tiny_config("SFH", n_layers=3, window=5)                       # RoPE, GQA (4 q, 2 kv heads)
  model = build_model(resolve(c).model, 3)
  t = 20
  tokens = np.random.default_rng(1).integers(0, 256, (2, t))
  rows = np.array([[0, 4, 17, 19], [19, 3, 12, 18]])
  out = F.forward(model, tokens, rows, want=("probs",))
  x = model.embed(jnp.asarray(tokens))
  for layer, block in enumerate(model.blocks):
    h = block.mixer_norm(x)
    windows = F.head_windows(block.mixer, t)
    p_dense, o_dense = _dense_probs(block.mixer, h, windows)
    # the reference is the model's attention: its output reproduces the mixer's
    y = block.mixer.o_proj(o_dense.reshape(2 * t, -1)).reshape(2, t, -1)
    np.testing.assert_allclose(y, block.mixer(h), atol=2e-5)
    expected = np.take_along_axis(np.asarray(p_dense), rows[:, None, :, None], axis=2)
    np.testing.assert_allclose(out["probs"][layer], expected, atol=1e-6)
    x = block(x)
  assert F.head_windows(model.blocks[2].mixer, t) == (5, 5, t, t)      # H: 2 local heads


def test_forward_without_plan_is_the_model():
  c = tiny_config("HM", n_layers=2)
  model = build_model(resolve(c).model, 0)
  tokens = np.random.default_rng(0).integers(0, 256, (2, 16))
  rows = np.broadcast_to(np.arange(16), (2, 16))
  out = F.forward(model, tokens, rows, want=())
  np.testing.assert_allclose(out["logits"], model(jnp.asarray(tokens)), atol=2e-5)


# --- receptive-field constraint ------------------------------------------------------------

def test_constraining_swa_layers_to_their_window_or_more_changes_nothing():
  model = build_model(resolve(tiny_config("S", n_layers=2, window=8)).model, 0)
  tokens = np.random.default_rng(2).integers(0, 256, (2, 40))
  rows = np.broadcast_to(np.arange(40), (2, 40))
  logits = lambda plan: np.asarray(F.forward(model, tokens, rows, plan, want=())["logits"])
  base = logits(F.Plan())
  for w in (8, 9, 64):
    np.testing.assert_array_equal(logits(constrain.plans(w)["efficient_constrained"]), base)
    np.testing.assert_array_equal(logits(constrain.plans(w)["full_constrained"]), base)
  capped = logits(constrain.plans(3)["efficient_constrained"])
  assert np.abs(capped - base).max() > 1e-3
  # The cap really is a window: the same weights in a window-3 model give the same logits.
  narrow = build_model(resolve(tiny_config("S", n_layers=2, window=3)).model, 0)
  nnx.update(narrow, nnx.state(model))
  want = np.asarray(narrow(jnp.asarray(tokens, jnp.int32)))
  np.testing.assert_allclose(capped, want, rtol=1e-5, atol=1e-5)


def test_recurrent_reset_sees_only_its_block():
  """One Mamba-2 layer reset every W tokens: position i's logits are those of the model
  run on the tokens of its block alone."""
  model = build_model(resolve(tiny_config("M", n_layers=1)).model, 0)
  t, w = 24, 8
  tokens = np.random.default_rng(3).integers(0, 256, (1, t))
  rows = np.arange(t)[None]
  got = np.asarray(F.forward(model, tokens, rows, F.Plan(reset_block=w), want=())["logits"])[0]
  for start in range(0, t, w):
    alone = np.asarray(model(jnp.asarray(tokens[:, start:start + w])))[0]
    np.testing.assert_allclose(got[start:start + w], alone, atol=2e-5)
  base = np.asarray(F.forward(model, tokens, rows, want=())["logits"])[0]
  assert np.abs(got[w:] - base[w:]).max() > 1e-4


# --- gradient influence ----------------------------------------------------------------------

def test_gradient_influence_of_swa_stack_vanishes_beyond_its_receptive_field():
  n, w = 2, 4
  model = build_model(resolve(tiny_config("S", n_layers=n, window=w)).model, 0)
  tokens = np.random.default_rng(4).integers(0, 256, (2, 48))
  res = gradient.influence(model, tokens, n_targets=3)
  d = np.asarray(res["per_distance"])
  reach = n * (w - 1)
  assert np.all(d[reach + 1:] == 0.0)
  assert d[reach] > 0 and np.all(d[:reach + 1] > 0)
  assert len(d) == 48 - 3


# --- probes ------------------------------------------------------------------------------------

def test_logistic_regression_gradient_is_exact():
  rng = np.random.default_rng(0)
  x, y = rng.normal(size=(30, 5)), rng.integers(0, 3, 30)
  clf = probe.LogisticRegression(0.1)
  onehot = np.eye(3)[y]
  err = check_grad(lambda th: clf.objective(th, x, onehot)[0],
                   lambda th: clf.objective(th, x, onehot)[1], rng.normal(size=18))
  assert err < 1e-4


def test_probe_separable_high_and_shuffled_labels_at_chance():
  rng = np.random.default_rng(0)
  n_classes, n = 4, 400
  y = rng.integers(0, n_classes, n)
  centers = rng.normal(size=(n_classes, 16)) * 3
  x = centers[y] + rng.normal(size=(n, 16))
  assert probe.probe_accuracy(x, y, n_classes) >= 0.95
  shuffled = rng.permutation(y)
  assert probe.probe_accuracy(x, shuffled, n_classes) < 0.45       # chance 0.25, 80 test rows
  assert probe.probe_accuracy(x, y, n_classes) == probe.probe_accuracy(x, y, n_classes)


# --- the CLI on a tiny trained run ----------------------------------------------------------

LENGTH = "170"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
  from hybrid_jax.standard_run import train
  c = tiny_config("FM", steps=4, n_layers=2)
  c.checkpoint.every = 2
  c.eval.every = None
  path = tmp_path_factory.mktemp("analyze") / "run"
  train(c, str(path))
  return path


def _analyze(*argv):
  """``hybrid-jax analyze ...``; a user error (exit 2, one line) raises SystemExit."""
  code = cli.main(["analyze", *map(str, argv)])
  if code:
    raise SystemExit(code)
  return code


@pytest.mark.parametrize("what,args,stem", [
    ("heads", ["--samples", 3], "heads-step4"),
    ("constrain", ["--samples", 3, "--window", 16, "--short-rows", 1], "constrain-W16-step4"),
    ("ablate", ["--samples", 3, "--k", 2], "ablate-k2-zero-step4"),
    ("probe", ["--samples", 12, "--classes", 3, "--delta"], "probe-delta-C3-step4"),
    ("gradient", ["--samples", 1, "--targets", 5, "--step", 2], "gradient-step2"),
])
def test_cli_writes_json_and_figures(run_dir, what, args, stem, capsys):
  assert _analyze(what, run_dir, "--length", LENGTH, *args) == 0
  out = run_dir / "analysis"
  rec = json.loads((out / f"{stem}.json").read_text())
  assert (out / f"{stem}.png").stat().st_size > 0 and (out / f"{stem}.svg").stat().st_size > 0
  assert f"wrote {out / stem}.json" in capsys.readouterr().out
  if what == "heads":
    assert np.array(rec["mass"], dtype=float).shape == (2, 4)
    assert rec["mass"][1] == [None] * 4                   # the recurrent layer has no heads
    assert sorted(map(tuple, rec["top_heads"])) == [(0, h) for h in range(4)]
  if what == "constrain":
    assert set(rec["settings"]) == {"none", "full_constrained", "efficient_constrained"}
    assert all(np.isfinite(v["short_loss"]) for v in rec["settings"].values())
  if what == "probe":
    assert len(rec["accuracy"]) == 2 and rec["chance"] == pytest.approx(1 / 3)
  if what == "gradient":
    assert len(rec["per_distance"]) == int(LENGTH) - 5


def test_cli_trace_two_runs_into_one_figure(run_dir, tmp_path):
  other = tmp_path / "copy"
  shutil.copytree(run_dir, other, ignore=shutil.ignore_patterns("analysis"))
  out = tmp_path / "fig"
  assert _analyze("trace", run_dir, other, "--length", LENGTH, "--samples", 2, "--top-k", 2,
                  "--out", out) == 0
  rec = json.loads((other / "analysis" / "trace.json").read_text())
  assert [p["step"] for p in rec["points"]] == checkpoint_steps(run_dir)
  assert rec["points"][-1]["heads"][0]["q_l2"] == 0.0          # the reference is the last step
  assert rec["points"][0]["heads"][0]["q_rel_l2"] > 0
  assert (out / "trace.png").exists() and (out / "trace.svg").exists()


def test_cli_bad_input_one_line_nothing_written(run_dir, tmp_path, capsys):
  empty = tmp_path / "empty"
  empty.mkdir()
  shutil.copy(run_dir / "config.json", empty / "config.json")
  before = sorted(p.name for p in (run_dir / "analysis").iterdir()) \
      if (run_dir / "analysis").exists() else []
  cases = [(["heads", empty], "holds no checkpoints"),
           (["heads", run_dir, "--step", 99], "--step"),
           (["heads", run_dir, "--top-k", 9], "--top-k"),
           (["ablate", run_dir, "--k", 9], "--k"),
           (["constrain", run_dir, "--window", 0], "--window"),
           (["probe", run_dir, "--samples", 4, "--classes", 8], "--samples"),
           (["heads", run_dir, "--length", 20], "--length"),
           (["probe", run_dir, "--task", "mqar"], "--task"),
           (["heads", run_dir, "--length", LENGTH, "--query-offset", 100000], "--query-offset"),
           (["heads", run_dir, "--length", LENGTH, "--beyond", int(LENGTH)], "--beyond")]
  for argv, needle in cases:
    with pytest.raises(SystemExit) as e:
      _analyze(*argv)
    assert e.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("hybrid-jax: error:") and "\n" not in err and needle in err, err
  assert not (empty / "analysis").exists()
  after = sorted(p.name for p in (run_dir / "analysis").iterdir()) \
      if (run_dir / "analysis").exists() else []
  assert after == before


def test_long_context_chunked_attention_is_the_model(monkeypatch):
  """Beyond LONG_CONTEXT full heads run query chunk by chunk: same logits, same gradient
  influence as the model's own kernel."""
  model = build_model(resolve(tiny_config("H", n_layers=1, window=5)).model, 0)  # 2 local, 2 full
  tokens = np.random.default_rng(5).integers(0, 256, (1, 40))
  rows = np.arange(40)[None]
  ref_grad = gradient.influence(model, tokens, n_targets=3)["per_distance"]
  monkeypatch.setattr(F, "LONG_CONTEXT", 16)
  monkeypatch.setattr(F, "QUERY_CHUNK", 12)             # 40 = 3 chunks of 12 + a padded one
  got = F.forward(model, tokens, rows, want=())
  np.testing.assert_allclose(got["logits"], model(jnp.asarray(tokens)), atol=2e-5)
  np.testing.assert_allclose(gradient.influence(model, tokens, n_targets=3)["per_distance"],
                             ref_grad, rtol=1e-4)


def test_cli_defaults_are_per_subcommand():
  from hybrid_jax.commands.analyze import _parser
  parse = lambda *a: _parser().parse_args(list(a))
  assert [parse(w, "RUN").samples for w in ("heads", "probe", "gradient")] == [16, 64, 4]
  assert parse("trace", "A", "B").run == ["A", "B"] and parse("heads", "A").run == "A"


def test_mean_ablation_does_not_leak_later_tokens_into_earlier_rows():
  from hybrid_jax.analysis.mechanism import forward as F
  o = jax.random.normal(jax.random.PRNGKey(0), (2, 10, 4, 3))
  changed = o.at[:, 6:].add(5.0)                              # only positions 6.. differ
  a, b = (F.ablate_heads(x, [1, 2], "mean") for x in (o, changed))
  np.testing.assert_array_equal(a[:, :6], b[:, :6])
  np.testing.assert_allclose(a[:, 3, 1], o[:, :4, 1].mean(axis=1), rtol=1e-6)   # mean up to row 3
  np.testing.assert_array_equal(a[:, :, 0], o[:, :, 0])       # other heads untouched


def test_cli_trace_of_the_heads_of_some_layer_kinds_only(run_dir, tmp_path, capsys):
  assert _analyze("trace", run_dir, "--length", LENGTH, "--samples", 2, "--top-k", 2,
                  "--layers", "F", "--out", tmp_path) == 0
  rec = json.loads((run_dir / "analysis" / "trace-F.json").read_text())
  assert rec["layers"] == "F" and {h[0] for h in rec["top_heads"]} == {0}     # FM: layer 0 is F
  assert (tmp_path / "trace-F.png").exists()
  before = json.loads((run_dir / "analysis" / "trace-F.json").read_text())
  capsys.readouterr()
  with pytest.raises(SystemExit) as e:                          # the M layer has no attention heads
    _analyze("trace", run_dir, "--length", LENGTH, "--samples", 2, "--top-k", 1, "--layers", "M")
  err = capsys.readouterr().err.strip()
  assert e.value.code == 2 and "--layers" in err and "\n" not in err, err
  assert json.loads((run_dir / "analysis" / "trace-F.json").read_text()) == before


@pytest.mark.parametrize("letter", ["S", "M", "G", "L"])
def test_one_cap_operator_for_every_layer_kind_sees_only_the_last_w_tokens(letter):
  """Capped at W, a one-layer model's logits at position i are those of the same model run on
  tokens i-W+1..i alone, for a SWA layer and for each recurrent mixer alike (RoPE is
  relative, so the attention layer's shift does not matter)."""
  model = build_model(resolve(tiny_config(letter, n_layers=1, window=8)).model, 0)
  t, w = 20, 4
  tokens = np.random.default_rng(5).integers(0, 256, (2, t))
  rows = np.broadcast_to(np.arange(t), (2, t))
  plan = constrain.plans(w)["efficient_constrained"]
  got = np.asarray(F.forward(model, tokens, rows, plan, want=())["logits"])
  for i in range(w - 1):                      # the first positions see fewer than W tokens
    alone = np.asarray(model(jnp.asarray(tokens[:, :i + 1])))[:, -1]
    np.testing.assert_allclose(got[:, i], alone, atol=3e-5, err_msg=f"position {i}")
  windows = np.stack([tokens[:, i - w + 1:i + 1] for i in range(w - 1, t)], axis=1)  # [2, t-w+1, w]
  alone = np.asarray(model(jnp.asarray(windows.reshape(-1, w))))[:, -1].reshape(2, t - w + 1, -1)
  np.testing.assert_allclose(got[:, w - 1:], alone, atol=3e-5)     # every later position at once
  base = np.asarray(F.forward(model, tokens, rows, want=())["logits"])
  assert np.abs(got[:, w:] - base[:, w:]).max() > 1e-4       # the cap does cut something


def test_cli_scores_heads_on_needles_beyond_a_window_only(run_dir):
  """--beyond W: every example's needle lies more than W tokens before its answer (so no
  window up to W reaches it), the record says so and the file has its own name."""
  from hybrid_jax.analysis.mechanism.runs import needle_distance, niah_examples
  cfg = resolve(tiny_config("FM", steps=4, n_layers=2))
  w = int(LENGTH) // 4
  every = niah_examples(cfg, "kv_recall", int(LENGTH), 8)
  far = niah_examples(cfg, "kv_recall", int(LENGTH), 8, beyond=w)
  assert min(needle_distance(ex) for ex in every) <= w < min(needle_distance(ex) for ex in far)
  assert len(far) == 8 and len({tuple(ex.tokens) for ex in far}) == 8
  assert _analyze("heads", run_dir, "--length", LENGTH, "--samples", 3, "--beyond", w) == 0
  rec = json.loads((run_dir / "analysis" / f"heads-beyond{w}-step4.json").read_text())
  assert rec["beyond"] == w
