"""The toy CPU default: a 1:1 SWA/full hybrid that trains in about a minute on 2 cores."""

from hybrid_jax.configs.base import base_config


def get_config():
  c = base_config()
  c.model.size = "toy-xs"
  c.model.pattern = "SF"
  c.model.window = 32
  c.data.seq_len = 256
  c.train.batch_size = 8
  c.train.tokens = 300 * 8 * 256   # 300 steps of 8 x 256 tokens
  c.checkpoint.every = 50
  return c
