"""``DataConfig``: the data package's typed, frozen view of a resolved ``data`` section
(its rules are ``config_rules.py``). The sources and the batch workers read it, so a
worker process receives this object rather than the run's whole ConfigDict."""

import dataclasses

from hybrid_jax.configs.typed import FrozenSection


@dataclasses.dataclass(frozen=True)
class DataConfig(FrozenSection):
  """Every key of ``base_config().data``, under the same names (see configs/base.py)."""
  SECTION = "data"

  name: str              # the source: synthetic | mix
  seq_len: int           # tokens per row
  seed: int              # the batches' seed (resolve fills it from train.seed)
  n_pairs: int           # key/value pairs per sequence (dense retrieval supervision)
  min_distance: int      # least query-to-evidence distance
  distance: str          # mix: distance law on [min_distance, seq_len]: log_uniform | uniform
  long_fraction: float   # mix: share of long rows (retrieval pairs in prose)
  short_len: int         # mix: tokens per short document
  corpus: str            # mix: corpus directory ("" = prose from the seed)
  tokenizer: str         # "byte", or a sentencepiece model file / data directory holding one
  workers: int           # grain processes making batches ahead (-1: per host kind)
  prefetch: int          # batches each worker makes ahead of the step
