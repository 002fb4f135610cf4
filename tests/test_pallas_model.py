"""Models reach the Pallas kernels only through the kernels' api.py: a hybrid trained a few
steps with the TPU kernels (interpreted on CPU) follows the XLA path's losses."""

import json

import numpy as np
import pytest

from conftest import tiny_config
from hybrid_jax.standard_run import train


def losses(workdir):
  return [json.loads(l)["loss"] for l in (workdir / "metrics.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("pattern", ["SF", "LG"])
def test_pallas_tpu_model_trains_like_xla(tmp_path, pattern):
  curves = {}
  for impl in ("xla", "pallas_tpu"):
    cfg = tiny_config(pattern, steps=3, attention_impl=impl, recurrent_impl=impl)
    cfg.model.n_heads, cfg.model.n_kv_heads = 2, 1
    cfg.data.seq_len = 24
    cfg.train.batch_size = 2
    cfg.checkpoint.every = 100
    train(cfg, tmp_path / impl, progress=False)
    curves[impl] = losses(tmp_path / impl)
  assert len(curves["xla"]) == 3
  np.testing.assert_allclose(curves["pallas_tpu"], curves["xla"], rtol=2e-4)
