"""Config rules of the data section beyond the synthetic source's: the tokenizer, the corpus
directory and the training mix. Each failure is one line naming the field."""

from pathlib import Path


def check_data(d, vocab_size: int, fail) -> None:
  """``fail(field, rule, value)`` raises; called by ``configs.validate`` before any compute."""
  from hybrid_jax.data.tokenizer import BYTE, load_tokenizer
  if d.tokenizer != BYTE:
    try:
      vocab = load_tokenizer(d.tokenizer).vocab_size
    except Exception as e:   # a missing or corrupt model file
      fail("data.tokenizer", f"must be 'byte' or a sentencepiece model / tokenizer.json ({' '.join(str(e).split())[:160]})",
           d.tokenizer)
    if vocab_size < vocab:
      fail("model.vocab_size", f"must be >= the tokenizer's vocabulary {vocab} ({d.tokenizer})",
           vocab_size)
  if d.name != "mix":
    return
  from hybrid_jax.data.mix import DISTANCES, PAIR_CHARS, max_pairs
  if d.tokenizer == BYTE and vocab_size < 256:
    fail("model.vocab_size", "byte-level text needs >= 256 tokens", vocab_size)
  if d.distance not in DISTANCES:
    fail("data.distance", f"must be one of {DISTANCES}", d.distance)
  if not 0.0 <= d.long_fraction <= 1.0:
    fail("data.long_fraction", "must be in [0, 1]", d.long_fraction)
  if not isinstance(d.short_len, int) or not 1 <= d.short_len <= d.seq_len:
    fail("data.short_len", f"must be an integer in [1, seq_len={d.seq_len}]", d.short_len)
  if d.n_pairs > max_pairs(d.seq_len):
    fail("data.n_pairs", f"mix: must be <= seq_len/28 = {max_pairs(d.seq_len)} (the pairs' two "
         "copies may cover at most half of a long row)", d.n_pairs)
  if d.n_pairs and max(d.min_distance, PAIR_CHARS) > d.seq_len + 1 - PAIR_CHARS:
    fail("data.min_distance", f"mix: leaves no room for a pair (must be <= seq_len + 1 - {PAIR_CHARS} "
         f"= {d.seq_len + 1 - PAIR_CHARS})", d.min_distance)
  if d.corpus:
    from hybrid_jax.data.corpus import MANIFEST
    if not (Path(d.corpus) / MANIFEST).is_file():
      fail("data.corpus", f"must be '' or a directory built by `hybrid-jax data build` (no {MANIFEST})",
           d.corpus)


def data_fingerprint(d) -> str | None:
  """sha256 (12 hex digits) of the files the data depend on beyond the config: the
  tokenizer file (tokenizer.json or sentencepiece model) and the corpus manifest (its sources and per-split document and
  character counts). Stored
  in ``derived``, so a resumed run whose tokenizer was retrained or corpus rebuilt is
  refused like any other config change instead of silently training on other batches."""
  import hashlib

  from hybrid_jax.data.corpus import MANIFEST
  from hybrid_jax.data.tokenizer import tokenizer_file
  files = []
  if (path := tokenizer_file(d.tokenizer)) is not None:   # tokenizer.json or tokenizer.model
    files.append(path)
  if d.name == "mix" and d.corpus:
    files.append(Path(d.corpus) / MANIFEST)
  if not files:
    return None
  h = hashlib.sha256()
  for f in files:
    h.update(f.read_bytes())
  return h.hexdigest()[:12]
