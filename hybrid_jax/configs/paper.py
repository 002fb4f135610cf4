"""The paper-scale base config shared by the paper's sweep files (16K context, bf16, the
1:1 long/short mix). Point ``data.corpus`` (and ``data.tokenizer``) at a built corpus
before submitting; the generated-prose default only exercises the pipeline."""

from hybrid_jax.configs.base import base_config

BUDGETS = [100.0, 200.0, 300.0, 400.0, 500.0, 1000.0]      # token budgets, multiples of N
SLURM = dict(timeout_min=2880, gpus_per_node=8, tasks_per_node=1, cpus_per_task=16)


def get_config():
  c = base_config()
  c.model.dtype = "bfloat16"
  c.model.vocab_size = 32000
  c.data.name = "mix"
  c.data.seq_len = 16384
  c.data.n_pairs = 64
  c.data.short_len = 2048
  c.train.batch_size = 32              # 0.5M tokens per step
  c.train.lr = 1e-3
  c.train.warmup_steps = 500
  c.train.schedule = "wsd"
  c.train.log_every = 50
  c.train.tokens_per_param = 100.0
  c.checkpoint.every = 500
  c.checkpoint.log_min_step = 64
  c.eval.lengths = (4096, 16384, 32768)
  return c
