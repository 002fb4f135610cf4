"""Stateless data sources: the batch of step s is a pure function of (seed, s)."""

from hybrid_jax.data.synthetic import SyntheticRetrieval


def make_source(cfg):
  """The data source a resolved config names."""
  if cfg.data.name == "synthetic":
    return SyntheticRetrieval(cfg.data, batch_size=cfg.train.batch_size)
  raise ValueError(f"unknown data source {cfg.data.name!r}")
