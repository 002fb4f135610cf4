"""Stateless data sources: the batch of step s is a pure function of (seed, s)."""

from hybrid_jax.data.config import DataConfig
from hybrid_jax.data.corpus import open_corpus
from hybrid_jax.data.mix import TrainingMix
from hybrid_jax.data.synthetic import SyntheticRetrieval
from hybrid_jax.data.tokenizer import load_tokenizer


def make_source(cfg):
  """The data source a resolved config names."""
  return source_for(DataConfig.from_config(cfg.data), cfg.train.batch_size)


def source_for(data: DataConfig, batch_size: int):
  """The source ``data`` names, making batches of ``batch_size`` rows."""
  if data.name == "synthetic":
    return SyntheticRetrieval(data, batch_size=batch_size)
  if data.name == "mix":
    return TrainingMix(data, batch_size=batch_size)
  raise ValueError(f"unknown data source {data.name!r}")


def task_inputs(data_cfg):
  """(tokenizer, corpus) for a run's synthetic tasks: its own tokenizer and, when it trains
  on a corpus, that corpus's validation split (prose haystacks it never trained on). Only
  those two fields are read, so a requested (unresolved) section or DataConfig serves."""
  corpus = None
  if data_cfg.corpus:
    corpus = open_corpus(data_cfg.corpus, "validation")
  return load_tokenizer(data_cfg.tokenizer), corpus

