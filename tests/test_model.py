"""Model behaviour: causality per mixer, SWA receptive field, RoPE vs NoPE, GQA shapes."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from conftest import tiny_config
from hybrid_jax.resolve import resolve
from hybrid_jax.model import build_model, registry
from hybrid_jax.model.lm import decode
from hybrid_jax.model.attention import Attention


def _model(cfg):
  cfg = resolve(cfg)
  model = build_model(cfg.model, 0)
  graphdef, state = nnx.split(model)
  fwd = jax.jit(lambda state, tokens: nnx.merge(graphdef, state)(tokens))
  return lambda tokens: np.asarray(fwd(state, tokens)), cfg


@pytest.mark.parametrize("letter", registry.letters())
def test_changing_a_future_token_never_changes_earlier_outputs(letter):
  run, cfg = _model(tiny_config(pattern=letter))
  t = cfg.data.seq_len
  tokens = jax.random.randint(jax.random.PRNGKey(1), (2, t), 0, 256)
  p = 29
  changed = tokens.at[:, p].set((tokens[:, p] + 7) % 256)
  a, b = run(tokens), run(changed)
  np.testing.assert_array_equal(a[:, :p], b[:, :p])
  assert not np.allclose(a[:, p:], b[:, p:])  # the change is visible from p on


def test_swa_only_model_ignores_tokens_beyond_its_receptive_field():
  n_layers, w = 3, 5
  run, cfg = _model(tiny_config(pattern="S", n_layers=n_layers, window=w))
  tokens = jax.random.randint(jax.random.PRNGKey(2), (1, cfg.data.seq_len), 0, 256)
  p = 10
  changed = tokens.at[:, p].set((tokens[:, p] + 3) % 256)
  a, b = run(tokens), run(changed)
  reach = p + n_layers * (w - 1)        # the last position that can see token p
  np.testing.assert_array_equal(a[:, reach + 1:], b[:, reach + 1:])
  assert not np.allclose(a[:, reach], b[:, reach])


def test_full_attention_model_sees_the_whole_prefix():
  run, cfg = _model(tiny_config(pattern="F"))
  tokens = jax.random.randint(jax.random.PRNGKey(3), (1, cfg.data.seq_len), 0, 256)
  changed = tokens.at[:, 0].set((tokens[:, 0] + 5) % 256)
  assert not np.allclose(run(tokens)[:, -1], run(changed)[:, -1])


def _scores(pos):
  cfg = resolve(tiny_config(pattern="F", pos_full=pos))
  attn = Attention(cfg.model, local_heads=0, pos=pos, rngs=nnx.Rngs(0))
  x = jnp.broadcast_to(jax.random.normal(jax.random.PRNGKey(4), (1, 1, 32)), (1, 12, 32))
  q, k, _ = attn.qkv(x)          # the same content at every position
  k = jnp.repeat(k, q.shape[2] // k.shape[2], axis=2)
  return np.asarray(jnp.einsum("bqhd,bkhd->bhqk", q, k))


def test_nope_scores_are_position_independent_and_rope_scores_are_not():
  nope, rope = _scores("nope"), _scores("rope")
  np.testing.assert_allclose(nope, np.broadcast_to(nope[..., :1, :1], nope.shape), rtol=1e-5)
  assert np.ptp(rope) > 1e-2
  # RoPE scores depend only on the offset q - k (Toeplitz along the diagonals)
  np.testing.assert_allclose(rope[..., 5, 2], rope[..., 9, 6], rtol=1e-4)


def test_pos_fields_reach_the_right_layers():
  cfg = resolve(tiny_config(pattern="SF", pos_full="nope", pos_swa="rope"))
  model = build_model(cfg.model, 0)
  assert [b.mixer.pos for b in model.blocks] == ["rope", "nope"]
  assert [b.mixer.local_heads for b in model.blocks] == [4, 0]


def test_headwise_layer_mixes_windowed_and_full_heads():
  """In an H layer the windowed heads ignore far tokens and the full heads do not."""
  cfg = resolve(tiny_config(pattern="H", local_head_fraction=0.5, window=4))
  attn = Attention(cfg.model, local_heads=2, pos="rope", rngs=nnx.Rngs(0))
  x = jax.random.normal(jax.random.PRNGKey(5), (1, 20, 32))
  x2 = x.at[:, 2].add(1.0)
  capture = {}
  orig = attn.o_proj
  attn.o_proj = lambda o: capture.setdefault(len(capture), o) @ orig.kernel[...]
  attn(x)
  attn(x2)
  o1, o2 = (np.asarray(capture[i]).reshape(1, 20, 4, 8) for i in (0, 1))
  np.testing.assert_array_equal(o1[:, 10:, :2], o2[:, 10:, :2])     # windowed heads
  assert not np.allclose(o1[:, 10:, 2:], o2[:, 10:, 2:])           # full heads


def test_untied_head_and_bfloat16_compute():
  run, cfg = _model(tiny_config(pattern="SF", tie_embeddings=False, dtype="bfloat16"))
  out = run(jnp.zeros((1, cfg.data.seq_len), jnp.int32))
  assert out.shape == (1, cfg.data.seq_len, 256) and np.isfinite(out).all()


@pytest.mark.parametrize("letter", registry.letters())
def test_token_by_token_decoding_gives_the_parallel_logits(letter):
  pattern = letter if letter == "F" else letter + "F"
  cfg = resolve(tiny_config(pattern=pattern))
  model = build_model(cfg.model, 0)
  tokens = jax.random.randint(jax.random.PRNGKey(6), (2, 40), 0, 256)
  parallel = np.asarray(jax.jit(lambda t: model(t))(tokens))
  stepped = np.asarray(decode(model, tokens, max_len=64))
  np.testing.assert_allclose(stepped, parallel, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("letter", registry.letters())
def test_cache_size_matches_state_size_and_efficient_layers_do_not_grow(letter):
  cfg = resolve(tiny_config(pattern=letter))
  model = build_model(cfg.model, 0)
  spec = registry.get(letter)
  floats = lambda cache: sum(x.size for x in jax.tree.leaves(cache)
                             if jnp.issubdtype(x.dtype, jnp.floating))
  for max_len in (64, 1024):
    cache = model.blocks[0].mixer.init_cache(1, max_len)
    assert floats(cache) == spec.state_size(cfg.model, max_len)
  small, big = spec.state_size(cfg.model, 64), spec.state_size(cfg.model, 1024)
  if spec.kind in ("full", "headwise"):
    assert big == 16 * small
  else:
    assert big == small
