"""The corpus directory's names and its error type: a leaf that both the corpus (text) and
its token ids read, so neither imports the other's module for them."""

from hybrid_jax.errors import UserError

MANIFEST = "corpus.json"          # written last by a build: its presence marks a complete corpus
SPLITS = ("train", "validation")
TOKENS_DIR = "tokens"             # token ids, one directory per tokenizer fingerprint


class CorpusError(UserError, ValueError):
  """A bad source or corpus directory; the message is one line."""
