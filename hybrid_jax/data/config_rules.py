"""Config rules of the data section: the source, the sequence and pair layout, the
tokenizer, the corpus directory and the training mix. Each failure is one line naming the
field."""

import hashlib
from pathlib import Path

from hybrid_jax.data.layout import MANIFEST, CorpusError
from hybrid_jax.data.mix import DISTANCES, PAIR_CHARS, max_pairs
from hybrid_jax.data.synthetic import MIN_VOCAB
from hybrid_jax.data.token_ids import check_ids
from hybrid_jax.data.tokenizer import BYTE, load_tokenizer, tokenizer_file

DATASETS = ("synthetic", "mix")


def check_data(d, vocab_size: int, fail) -> None:
  """``fail(field, rule, value)`` raises; called by ``hybrid_jax.resolve`` before any compute."""
  if d.name not in DATASETS:
    fail("data.name", f"must be one of {DATASETS}", d.name)
  if not isinstance(d.seq_len, int) or d.seq_len < 2:
    fail("data.seq_len", "must be an integer >= 2", d.seq_len)
  if d.n_pairs < 0 or 6 * d.n_pairs > d.seq_len:
    fail("data.n_pairs", f"must be in [0, seq_len/6 = {d.seq_len // 6}]", d.n_pairs)
  if not 1 <= d.min_distance < d.seq_len:
    fail("data.min_distance", f"must be in [1, seq_len={d.seq_len})", d.min_distance)
  if not isinstance(d.workers, int) or d.workers < -1:
    fail("data.workers", "must be an integer >= 0, or -1 (one per core but one, on an "
         "accelerator host; 0 on a CPU-only host)", d.workers)
  if not isinstance(d.prefetch, int) or d.prefetch < 1:
    fail("data.prefetch", "must be an integer >= 1 (batches each worker makes ahead)", d.prefetch)
  if d.name == "synthetic":
    if vocab_size < MIN_VOCAB:
      fail("model.vocab_size", f"synthetic data needs >= {MIN_VOCAB} tokens", vocab_size)
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
    if not (Path(d.corpus) / MANIFEST).is_file():
      fail("data.corpus", f"must be '' or a directory built by `hybrid-jax data build` (no {MANIFEST})",
           d.corpus)
    try:
      check_ids(d.corpus, d.tokenizer)
    except CorpusError as e:     # no ids for this tokenizer: the message names the command
      fail("data.corpus", str(e).split(": ", 1)[1], d.corpus)


def data_fingerprint(d) -> str | None:
  """sha256 (12 hex digits) of the files the data depend on beyond the config: the
  tokenizer file (tokenizer.json or sentencepiece model) and the corpus manifest (its sources and per-split document and
  character counts). Stored
  in ``derived``, so a resumed run whose tokenizer was retrained or corpus rebuilt is
  refused like any other config change instead of silently training on other batches."""
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
