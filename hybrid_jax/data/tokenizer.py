"""Tokenizers: byte-level by default (nothing to download, vocab 256), a Hugging Face
``tokenizer.json`` (read with the ``tokenizers`` library; ``hybrid-jax data tokenizer train``
trains a byte-level BPE on a built corpus), or a sentencepiece model trained by
``hybrid-jax data tokenizer`` and stored with the data.

All expose ``vocab_size``, ``eos_id`` (the document separator of packed rows),
``encode(str) -> int32 [n]``, ``decode(ids) -> str`` and ``encode_units(list[str])``, which
encodes pieces of text separately and says where each starts: the task generators build
examples from such pieces so that every answer's token positions are known exactly.
"""

import io
import os
from pathlib import Path

import numpy as np

from hybrid_jax.run import atomic_write_bytes

BYTE = "byte"
SENTENCEPIECE_FILE = "tokenizer.model"
HF_FILE = "tokenizer.json"
EOS_TOKEN = "<|endoftext|>"        # id 0 of the BPEs trained here: the document separator


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
    import sentencepiece as spm   # lazy: optional dependency of the sentencepiece tokenizer
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


class HFTokenizer:
  """A Hugging Face ``tokenizer.json`` (any model the ``tokenizers`` library reads); no
  special tokens are added when encoding, so pieces encode exactly as their text."""

  def __init__(self, path: str | os.PathLike):
    from tokenizers import Tokenizer   # lazy: optional dependency of the BPE tokenizer
    path = Path(path)
    if not path.is_file():
      raise ValueError(f"tokenizer: no tokenizer.json at {path}")
    try:
      self.tok = Tokenizer.from_file(str(path))
    except Exception as e:   # not JSON, or not a tokenizer
      raise ValueError(f"tokenizer: {path} is not a Hugging Face tokenizer.json "
                       f"({' '.join(str(e).split())[:120]})") from None
    self.path = path
    self.vocab_size = self.tok.get_vocab_size(with_added_tokens=True)
    eos = self.tok.token_to_id(EOS_TOKEN)
    self.eos_id = 0 if eos is None else eos
    self.name = str(path)

  def encode(self, text: str) -> np.ndarray:
    return np.asarray(self.tok.encode(text, add_special_tokens=False).ids, np.int32)

  def decode(self, ids) -> str:
    return self.tok.decode([int(i) for i in np.asarray(ids).reshape(-1)], skip_special_tokens=False)

  def encode_units(self, units: list[str]) -> tuple[np.ndarray, np.ndarray]:
    pieces = [e.ids for e in self.tok.encode_batch(list(units), add_special_tokens=False)]
    lengths = np.fromiter(map(len, pieces), np.int64, len(pieces))
    flat = np.fromiter((t for p in pieces for t in p), np.int32, int(lengths.sum()))
    return flat, lengths


def tokenizer_file(spec: str) -> Path | None:
  """The file a non-byte spec names: the file itself, or the ``tokenizer.json`` (else
  ``tokenizer.model``) of a data directory. None for the byte tokenizer."""
  if spec in (None, "", BYTE):
    return None
  path = Path(spec)
  if path.is_dir():
    return path / HF_FILE if (path / HF_FILE).is_file() else path / SENTENCEPIECE_FILE
  return path


def load_tokenizer(spec: str | None = None):
  """``"byte"`` (or None) -> ByteTokenizer; a ``.json`` file or a directory holding
  ``tokenizer.json`` -> HFTokenizer; a ``.model`` file or a directory holding
  ``tokenizer.model`` -> SentencePieceTokenizer. Bad specs raise a one-line ValueError."""
  path = tokenizer_file(spec)
  if path is None:
    return ByteTokenizer()
  return HFTokenizer(path) if path.suffix == ".json" else SentencePieceTokenizer(path)


def train_bpe(texts, out_dir: str | os.PathLike, *, vocab_size: int = 32000) -> Path:
  """Train a byte-level BPE (GPT-2 style pre-tokenizer without a prefix space, so every
  text round-trips) on an iterable of documents; store ``out_dir/tokenizer.json`` atomically.
  Id 0 is ``<|endoftext|>``, the document separator; ids 1-256 cover every byte."""
  from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers   # lazy: optional dependency of the BPE tokenizer

  tok = Tokenizer(models.BPE())
  tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  tok.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS_TOKEN],
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                show_progress=False)
  tok.train_from_iterator(texts, trainer=trainer)
  out = Path(out_dir) / HF_FILE
  atomic_write_bytes(out, tok.to_str().encode("utf-8"))
  return out


def train_sentencepiece(texts, out_dir: str | os.PathLike, *, vocab_size: int = 4096,
                        model_type: str = "bpe", max_sentences: int = 200_000) -> Path:
  """Train on an iterable of documents and store ``out_dir/tokenizer.model`` atomically.

  Documents are split into lines (sentencepiece's unit); newlines and other bytes outside
  the learnt pieces round-trip through byte fallback, so decode(encode(text)) == text.
  """

  import sentencepiece as spm   # lazy: optional dependency of the sentencepiece tokenizer

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
