"""A run's checkpoint as a Hugging Face directory that ``AutoModelForCausalLM`` and
``AutoTokenizer`` load with no custom code: config.json, model.safetensors, tokenizer files.

Each pattern maps onto an existing transformers class that computes the same function
(checked against transformers in tests/test_export_hf.py):

- only F and S layers -> ``SmolLM3ForCausalLM``: Llama blocks with per-layer
  ``layer_types`` (sliding window w: query i sees keys i - w < j <= i, as here) and per-layer
  RoPE/NoPE (``no_rope_layers``);
- only G layers -> ``Qwen3NextForCausalLM`` with every layer ``linear_attention`` and a dense
  SwiGLU MLP (no experts): the same Gated DeltaNet (conv over q/k/v, L2-normalised q/k with
  scale dk^-0.5, sigmoid beta, g = -exp(A) softplus(a + dt_bias), norm-then-silu(z) gate); its
  (1 + weight) RMSNorms get weight - 1; ``use_cache=false``, since transformers' cache cannot
  serve a model without attention layers (generation recomputes the prefix each token);
- M and F layers -> ``GraniteMoeHybridForCausalLM`` with its multipliers set to the plain
  model's (no experts, a dense SwiGLU ``shared_mlp``, attention scale head_dim^-0.5): the
  same Mamba-2 (one B/C group, conv over x/B/C, gated RMSNorm over d_inner, D skip) and
  full attention with RoPE or NoPE.

Everything else is refused with one line saying what no class computes (``UNSUPPORTED``).
"""

import json
import os
import shutil
from pathlib import Path

import numpy as np

from hybrid_jax.data.tokenizer import HF_FILE, load_tokenizer, tokenizer_file
from hybrid_jax.errors import UserError
from hybrid_jax.loading import load_run
from hybrid_jax.model import gated_deltanet, mamba2
from hybrid_jax.resolve import resolve
from hybrid_jax.run import load_config


class ExportError(UserError, ValueError):
  """The run cannot be exported as asked: one line."""


UNSUPPORTED = {
    "H": "no transformers class has head-wise windows (some heads of one layer windowed, the "
         "others full)",
    "G": "with attention layers: transformers' only Gated DeltaNet class (Qwen3-Next) gates its "
         "attention output with sigmoid(W x), RMS-normalises q and k and rotates a quarter of "
         "each head, which hybrid_jax's F/S layers do not (a pattern of G alone exports)",
    "L": "transformers' Lightning attention (MiniMax) scales each layer's decays by a "
         "layer-dependent factor and normalises across all heads; hybrid_jax's L has fixed "
         "per-head decays and a per-head norm",
}
SMOLLM3, GRANITE = "SmolLM3ForCausalLM", "GraniteMoeHybridForCausalLM"
QWEN3NEXT = "Qwen3NextForCausalLM"


def target_class(model_cfg) -> str:
  """The transformers class a pattern exports to; ExportError (one line) when none computes
  the same function."""
  letters = set(model_cfg.pattern)
  if letters == {"G"}:
    return QWEN3NEXT
  for letter in sorted(letters & set(UNSUPPORTED)):
    raise ExportError(f"pattern {model_cfg.pattern!r}: letter {letter} cannot be exported: "
                      f"{UNSUPPORTED[letter]}")
  if letters <= {"F", "S"}:
    return SMOLLM3
  if letters <= {"M", "F"}:
    return GRANITE
  raise ExportError(f"pattern {model_cfg.pattern!r} cannot be exported: no transformers class "
                    "mixes Mamba-2 with sliding-window attention (GraniteMoeHybrid, the "
                    "Mamba-2 hybrid that matches M, has only full attention)")


def _t(kernel):
  """flax Linear kernel [in, out] -> torch Linear weight [out, in]."""
  return np.ascontiguousarray(np.asarray(kernel, np.float32).T)


def _common_config(m, cfg, vocab_size, max_len):
  return dict(vocab_size=vocab_size, hidden_size=m.d_model, num_hidden_layers=m.n_layers,
              num_attention_heads=m.n_heads, num_key_value_heads=m.n_kv_heads,
              head_dim=m.head_dim or m.d_model // m.n_heads, hidden_act="silu",
              rms_norm_eps=m.norm_eps, attention_bias=False, tie_word_embeddings=m.tie_embeddings,
              max_position_embeddings=max_len, torch_dtype="float32", dtype="float32",
              rope_parameters=dict(rope_type="default", rope_theta=m.rope_theta),
              use_cache=True)


def _attention_weights(prefix, mixer):
  return {f"{prefix}.{n}.weight": _t(getattr(mixer, n).kernel[...])
          for n in ("q_proj", "k_proj", "v_proj", "o_proj")}


def _smollm3(model, m, letters):
  config = dict(architectures=[SMOLLM3], model_type="smollm3", intermediate_size=m.d_ff,
                mlp_bias=False, use_sliding_window="S" in letters, sliding_window=m.window,
                layer_types=["sliding_attention" if x == "S" else "full_attention" for x in letters],
                no_rope_layers=[int((m.pos_swa if x == "S" else m.pos_full) == "rope")
                                for x in letters])
  weights = {}
  for i, block in enumerate(model.blocks):
    p = f"model.layers.{i}"
    weights.update(_attention_weights(f"{p}.self_attn", block.mixer))
    weights[f"{p}.mlp.gate_proj.weight"] = _t(block.mlp.gate.kernel[...])
    weights[f"{p}.mlp.up_proj.weight"] = _t(block.mlp.up.kernel[...])
    weights[f"{p}.mlp.down_proj.weight"] = _t(block.mlp.down.kernel[...])
    weights[f"{p}.post_attention_layernorm.weight"] = np.asarray(block.mlp_norm.scale[...])
  return config, weights


def _granite(model, m, letters):
  d_inner, h, n = mamba2.dims(m)
  config = dict(architectures=[GRANITE], model_type="granitemoehybrid", intermediate_size=m.d_ff,
                shared_intermediate_size=m.d_ff, num_local_experts=0, num_experts_per_tok=0,
                embedding_multiplier=1.0, residual_multiplier=1.0, logits_scaling=1.0,
                attention_multiplier=(m.head_dim or m.d_model // m.n_heads) ** -0.5,
                position_embedding_type="rope" if m.pos_full == "rope" else None,
                layer_types=["linear_attention" if x == "M" else "full_attention" for x in letters],
                mamba_n_heads=h, mamba_n_groups=1, mamba_d_state=n, mamba_d_head=m.ssm_head_dim,
                mamba_d_conv=m.conv_kernel, mamba_expand=m.ssm_expand, mamba_chunk_size=m.chunk_size,
                mamba_conv_bias=True, mamba_proj_bias=False)
  weights = {}
  for i, block in enumerate(model.blocks):
    p = f"model.layers.{i}"
    mx = block.mixer
    if block.letter == "M":
      q = f"{p}.mamba"
      weights[f"{q}.in_proj.weight"] = _t(mx.in_proj.kernel[...])
      # ours: kernel [K, C], row K-1 the current token; torch conv1d: [C, 1, K], same taps
      weights[f"{q}.conv1d.weight"] = _t(mx.conv.kernel[...])[:, None, :].copy()
      weights[f"{q}.conv1d.bias"] = np.asarray(mx.conv.bias[...], np.float32)
      for name in ("dt_bias", "A_log", "D"):
        weights[f"{q}.{name}"] = np.asarray(getattr(mx, name)[...], np.float32)
      weights[f"{q}.norm.weight"] = np.asarray(mx.norm.scale[...], np.float32)
      weights[f"{q}.out_proj.weight"] = _t(mx.out_proj.kernel[...])
    else:
      weights.update(_attention_weights(f"{p}.self_attn", mx))
    weights[f"{p}.shared_mlp.input_linear.weight"] = np.concatenate(
        [_t(block.mlp.gate.kernel[...]), _t(block.mlp.up.kernel[...])], axis=0)
    weights[f"{p}.shared_mlp.output_linear.weight"] = _t(block.mlp.down.kernel[...])
    weights[f"{p}.post_attention_layernorm.weight"] = np.asarray(block.mlp_norm.scale[...])
  return config, weights


def _qwen3next(model, m, letters):
  h, dk, dv = gated_deltanet.dims(m)
  config = dict(architectures=[QWEN3NEXT], model_type="qwen3_next", intermediate_size=m.d_ff,
                layer_types=["linear_attention"] * len(letters), num_experts=0,
                mlp_only_layers=list(range(len(letters))), decoder_sparse_step=1,
                linear_num_key_heads=h, linear_num_value_heads=h, linear_key_head_dim=dk,
                linear_value_head_dim=dv, linear_conv_kernel_dim=m.conv_kernel,
                # transformers' cache builds attention masks from an attention layer, which a
                # G-only model lacks (ValueError in get_mask_sizes): compute without the cache
                use_cache=False)
  weights = {}
  for i, block in enumerate(model.blocks):
    p, mx = f"model.layers.{i}", block.mixer
    qkv = _t(mx.qkv_proj.kernel[...])                      # rows: q (h*dk), k (h*dk), v (h*dv)
    q, k, v = np.split(qkv, [h * dk, 2 * h * dk])
    z = _t(mx.g_proj.kernel[...])
    # in_proj_qkvz groups rows per head: [q_h, k_h, v_h, z_h]; in_proj_ba: [b_h, a_h]
    per_head = [x.reshape(h, -1, m.d_model) for x in (q, k, v, z)]
    weights[f"{p}.linear_attn.in_proj_qkvz.weight"] = np.concatenate(per_head, 1).reshape(-1, m.d_model)
    ba = [x.reshape(h, 1, m.d_model) for x in (_t(mx.b_proj.kernel[...]), _t(mx.a_proj.kernel[...]))]
    weights[f"{p}.linear_attn.in_proj_ba.weight"] = np.concatenate(ba, 1).reshape(-1, m.d_model)
    weights[f"{p}.linear_attn.conv1d.weight"] = _t(mx.conv.kernel[...])[:, None, :].copy()
    weights[f"{p}.linear_attn.dt_bias"] = np.asarray(mx.dt_bias[...], np.float32)
    weights[f"{p}.linear_attn.A_log"] = np.asarray(mx.A_log[...], np.float32)
    weights[f"{p}.linear_attn.norm.weight"] = np.asarray(mx.norm.scale[...], np.float32)
    weights[f"{p}.linear_attn.out_proj.weight"] = _t(mx.out_proj.kernel[...])
    weights[f"{p}.mlp.gate_proj.weight"] = _t(block.mlp.gate.kernel[...])
    weights[f"{p}.mlp.up_proj.weight"] = _t(block.mlp.up.kernel[...])
    weights[f"{p}.mlp.down_proj.weight"] = _t(block.mlp.down.kernel[...])
    weights[f"{p}.post_attention_layernorm.weight"] = np.asarray(block.mlp_norm.scale[...])
  return config, weights


def hf_state(model, cfg, max_len: int):
  """(config.json dict, {name: float32 array}) of ``model`` (an ``LM``) under ``cfg``."""
  m = cfg.model
  cls = target_class(m)
  letters = list(cfg.derived.layers)
  config, weights = {SMOLLM3: _smollm3, GRANITE: _granite, QWEN3NEXT: _qwen3next}[cls](
      model, m, letters)
  config = {**_common_config(m, cfg, m.vocab_size, max_len), **config}
  if cls == QWEN3NEXT:   # no rotary layer exists; keep its unused rotary within head_dim
    config.update(partial_rotary_factor=1.0)
  for i, block in enumerate(model.blocks):
    weights[f"model.layers.{i}.input_layernorm.weight"] = np.asarray(block.mixer_norm.scale[...])
  weights["model.embed_tokens.weight"] = np.asarray(model.embed.embedding[...], np.float32)
  weights["model.norm.weight"] = np.asarray(model.final_norm.scale[...], np.float32)
  if not m.tie_embeddings:
    weights["lm_head.weight"] = _t(model.head.kernel[...])
  if cls == QWEN3NEXT:   # its block and final RMSNorms scale by (1 + weight)
    for name in weights:
      if name.endswith("layernorm.weight") or name == "model.norm.weight":
        weights[name] = weights[name] - 1.0
  return config, {k: np.ascontiguousarray(v, np.float32) for k, v in weights.items()}


def byte_tokenizer_json() -> str:
  """hybrid_jax's byte tokenizer (id b = byte b) as a ``tokenizers`` byte-level BPE with no
  merges: the same ids for every text."""
  from tokenizers import Tokenizer, decoders, models   # lazy: optional dependency of the BPE tokenizer
  from tokenizers.pre_tokenizers import ByteLevel   # lazy: optional dependency of the BPE tokenizer
  byte_chars = _bytes_to_unicode()   # ByteLevel shows byte b as this character; its id is b
  tok = Tokenizer(models.BPE(vocab={byte_chars[b]: b for b in range(256)}, merges=[]))
  tok.pre_tokenizer = ByteLevel(add_prefix_space=False, use_regex=False)
  tok.decoder = decoders.ByteLevel()
  return tok.to_str()


def _bytes_to_unicode() -> dict[int, str]:
  """GPT-2's reversible byte -> printable character table (what ByteLevel uses)."""
  bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
      list(range(ord("®"), ord("ÿ") + 1))
  cs, n = bs[:], 0
  for b in range(256):
    if b not in bs:
      bs.append(b)
      cs.append(256 + n)
      n += 1
  return dict(zip(bs, map(chr, cs)))


def tokenizer_files(cfg) -> tuple[dict[str, str], int]:
  """({file name: text}, eos id) of the run's tokenizer for ``AutoTokenizer``: its
  tokenizer.json (the byte tokenizer written as one) and a tokenizer_config.json naming the
  fast class and the document separator as eos."""
  spec = cfg.data.tokenizer
  path = tokenizer_file(spec)
  if path is None:
    text, eos_id, eos = byte_tokenizer_json(), 0, _bytes_to_unicode()[0]
  elif path.suffix == ".json":
    tok = load_tokenizer(spec)
    text, eos_id, eos = path.read_text(), tok.eos_id, tok.tok.id_to_token(tok.eos_id)
  else:
    raise ExportError(f"data.tokenizer {spec!r}: sentencepiece models are not exported; train "
                      "a tokenizer.json with `hybrid-jax data tokenizer train`")
  tok_config = dict(tokenizer_class="PreTrainedTokenizerFast", clean_up_tokenization_spaces=False,
                    eos_token=eos, pad_token=eos)
  return {HF_FILE: text, "tokenizer_config.json": json.dumps(tok_config, indent=2)}, eos_id


def _save_file():
  """safetensors' writer; ExportError (one line) where the package is missing."""
  try:
    from safetensors.numpy import save_file   # lazy: only exports write safetensors
  except ImportError:
    raise ExportError("export hf needs the safetensors package (a dependency of hybrid_jax, "
                      "missing here): pip install -e . or pip install safetensors") from None
  return save_file


def save_hf(model, cfg, out, max_len: int | None = None) -> Path:
  """Write ``model`` (an ``LM`` under resolved ``cfg``) as the Hugging Face directory ``out``
  (absent or empty). Every check runs before anything is written; the directory is written
  next to ``out`` and renamed, so it appears complete or not at all."""
  save_file = _save_file()
  out = Path(out)
  if out.exists() and (not out.is_dir() or any(out.iterdir())):
    raise ExportError(f"--out {out} exists and is not an empty directory (never overwritten)")
  tok, eos_id = tokenizer_files(cfg)
  max_len = max_len or max(cfg.data.seq_len, *cfg.eval.lengths)
  config, weights = hf_state(model, cfg, max_len)
  config.update(bos_token_id=None, eos_token_id=eos_id, pad_token_id=eos_id)
  tmp = out.parent / f".{out.name}.tmp"
  if tmp.exists():
    shutil.rmtree(tmp)
  tmp.mkdir(parents=True)
  save_file(weights, str(tmp / "model.safetensors"), metadata=dict(format="pt"))
  (tmp / "config.json").write_text(json.dumps(config, indent=2))
  # safetensors creates its file 0600; give it the mode the umask gives every other file
  os.chmod(tmp / "model.safetensors", (tmp / "config.json").stat().st_mode & 0o777)
  (tmp / "generation_config.json").write_text(json.dumps(
      dict(eos_token_id=eos_id, pad_token_id=eos_id, bos_token_id=None,
           use_cache=config["use_cache"]), indent=2))
  for name, text in tok.items():
    (tmp / name).write_text(text)
  if out.exists():
    out.rmdir()
  tmp.rename(out)
  return out


def export_hf(workdir, out, step: int | None = None, max_len: int | None = None) -> Path:
  """``save_hf`` of checkpoint ``step`` (default: latest) of the run in ``workdir``; an
  unsupported pattern, a missing step or an unexportable tokenizer is refused in one line
  before any checkpoint is read."""
  out = Path(out)
  if out.exists() and (not out.is_dir() or any(out.iterdir())):
    raise ExportError(f"--out {out} exists and is not an empty directory (never overwritten)")
  cfg = resolve(load_config(workdir))
  target_class(cfg.model)
  tokenizer_files(cfg)
  _save_file()
  cfg, model = load_run(workdir, step)
  return save_hf(model, cfg, out, max_len)
