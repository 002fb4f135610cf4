"""A CPU train command compiles its first programs in a child process, and the training
process then loads its train step from the persistent compilation cache (XLA:CPU runs a
step it loaded faster than one it compiled itself); the losses do not change."""

import json
import os
import subprocess
import sys


def _train(tmp_path, name, precompile):
  """stderr and losses of a 20-step toy train command with its own, empty cache."""
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_LOG_COMPILES="1",
             JAX_COMPILATION_CACHE_DIR=str(tmp_path / f"cache-{name}"),
             HYBRID_JAX_PRECOMPILE=precompile)
  r = subprocess.run([sys.executable, "-m", "hybrid_jax.cli", "train", "--quiet",
                      "--workdir", str(tmp_path / name), f"--config.train.tokens={20 * 8 * 256}"],
                     env=env, capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  rows = [json.loads(l) for l in (tmp_path / name / "metrics.jsonl").read_text().splitlines()]
  return r.stderr, [row["loss"] for row in rows]


def test_a_cpu_train_command_loads_its_step_from_the_cache_a_child_filled(tmp_path):
  err, losses = _train(tmp_path, "child", "1")
  assert "Persistent compilation cache hit for 'jit_train_step'" in err
  err_off, losses_off = _train(tmp_path, "off", "0")
  assert "Persistent compilation cache hit for 'jit_train_step'" not in err_off
  assert len(losses) == 2 and losses == losses_off
