"""Stateless data sources: the batch of step s is a pure function of (seed, s)."""

from hybrid_jax.data.corpus import open_corpus
from hybrid_jax.data.mix import TrainingMix
from hybrid_jax.data.synthetic import SyntheticRetrieval
from hybrid_jax.data.tokenizer import load_tokenizer


def make_source(cfg):
  """The data source a resolved config names."""
  if cfg.data.name == "synthetic":
    return SyntheticRetrieval(cfg.data, batch_size=cfg.train.batch_size)
  if cfg.data.name == "mix":
    return TrainingMix(cfg.data, batch_size=cfg.train.batch_size)
  raise ValueError(f"unknown data source {cfg.data.name!r}")


def task_inputs(data_cfg):
  """(tokenizer, corpus) for a run's synthetic tasks: its own tokenizer and, when it trains
  on a corpus, that corpus's validation split (prose haystacks it never trained on)."""
  corpus = None
  if data_cfg.get("corpus"):
    corpus = open_corpus(data_cfg.corpus, "validation")
  return load_tokenizer(data_cfg.get("tokenizer", "byte")), corpus

