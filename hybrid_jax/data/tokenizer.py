"""Tokenizers: byte-level by default (nothing to download, vocab 256), or a sentencepiece model
trained on the corpus by ``hybrid-jax data tokenizer`` and stored with the data.

Both expose ``vocab_size``, ``eos_id`` (the document separator of packed rows),
``encode(str) -> int32 [n]``, ``decode(ids) -> str`` and ``encode_units(list[str])``, which
encodes pieces of text separately and says where each starts: the task generators build
examples from such pieces so that every answer's token positions are known exactly.
"""

import os
from pathlib import Path

import numpy as np

BYTE = "byte"
SENTENCEPIECE_FILE = "tokenizer.model"


class ByteTokenizer:
  """ids 0..255 are the UTF-8 bytes; byte 0 (NUL, never in text) separates documents."""

  vocab_size = 256
  eos_id = 0
  name = BYTE

  def encode(self, text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int32)

  def decode(self, ids) -> str:
    return bytes(np.asarray(ids, np.uint8).tobytes()).decode("utf-8", errors="replace")

  def encode_units(self, units: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """(tokens of all units concatenated, token length of each unit)."""
    raw = [u.encode("utf-8") for u in units]
    lengths = np.fromiter(map(len, raw), np.int64, len(raw))
    return np.frombuffer(b"".join(raw), np.uint8).astype(np.int32), lengths


class SentencePieceTokenizer:
  """A trained sentencepiece model (byte fallback, no dummy prefix, whitespace kept)."""

  def __init__(self, path: str | os.PathLike):
    import sentencepiece as spm
    path = Path(path)
    if not path.is_file():
      raise ValueError(f"tokenizer: no sentencepiece model at {path}")
    self.path = path
    self.sp = spm.SentencePieceProcessor(model_file=str(path))
    self.vocab_size = self.sp.get_piece_size()
    self.eos_id = self.sp.eos_id()
    self.name = str(path)

  def encode(self, text: str) -> np.ndarray:
    return np.asarray(self.sp.encode(text), np.int32)

  def decode(self, ids) -> str:
    return self.sp.decode([int(i) for i in np.asarray(ids).reshape(-1)])

  def encode_units(self, units: list[str]) -> tuple[np.ndarray, np.ndarray]:
    pieces = self.sp.encode(list(units))
    lengths = np.fromiter(map(len, pieces), np.int64, len(pieces))
    flat = np.fromiter((t for p in pieces for t in p), np.int32, int(lengths.sum()))
    return flat, lengths


def load_tokenizer(spec: str | None = None):
  """``"byte"`` (or None) -> ByteTokenizer; a ``.model`` file or a data directory holding
  ``tokenizer.model`` -> SentencePieceTokenizer. Bad specs raise a one-line ValueError."""
  if spec in (None, "", BYTE):
    return ByteTokenizer()
  path = Path(spec)
  if path.is_dir():
    path = path / SENTENCEPIECE_FILE
  return SentencePieceTokenizer(path)


def train_sentencepiece(texts, out_dir: str | os.PathLike, *, vocab_size: int = 4096,
                        model_type: str = "bpe", max_sentences: int = 200_000) -> Path:
  """Train on an iterable of documents and store ``out_dir/tokenizer.model`` atomically.

  Documents are split into lines (sentencepiece's unit); newlines and other bytes outside
  the learnt pieces round-trip through byte fallback, so decode(encode(text)) == text.
  """
  import io

  import sentencepiece as spm
  from hybrid_jax.train.rundir import atomic_write_bytes

  def lines():
    n = 0
    for doc in texts:
      for line in doc.split("\n"):
        if line.strip():
          yield line
          n += 1
          if n >= max_sentences:
            return

  buf = io.BytesIO()
  spm.SentencePieceTrainer.train(
      sentence_iterator=lines(), model_writer=buf, vocab_size=vocab_size, model_type=model_type,
      byte_fallback=True, add_dummy_prefix=False, remove_extra_whitespaces=False,
      normalization_rule_name="identity", split_digits=True, character_coverage=0.9995,
      allow_whitespace_only_pieces=True, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
      hard_vocab_limit=False,   # a small corpus yields a smaller vocabulary instead of failing
      minloglevel=2)
  out = Path(out_dir) / SENTENCEPIECE_FILE
  atomic_write_bytes(out, buf.getvalue())
  return out
