"""A CPU train command compiles its first programs in a child process (none when a receipt
says an earlier child did and the cache still holds them), and the training process then
loads its train step from the persistent compilation cache (XLA:CPU runs a step it loaded
faster than one it compiled itself); the losses do not change."""

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


def test_a_child_leaves_a_receipt_so_a_rerun_starts_no_child(monkeypatch):
  """A child that compiled records its programs' cache keys; the same config again (a rerun,
  a resume, another seed) then starts no child while the cache holds them. Another config,
  or an entry the cache evicted, brings the child back."""
  from hybrid_jax.configs.default import get_config
  from hybrid_jax.resolve import resolve
  from hybrid_jax.train import precompile

  def config(window, seed=0):
    c = get_config()
    c.model.window = window
    c.train.tokens = 20 * 8 * 256
    c.train.seed = seed
    return resolve(c)

  cfg = config(24)
  precompile.receipt(cfg).unlink(missing_ok=True)
  assert not precompile.cached(cfg)
  precompile.in_child(cfg)
  assert precompile.cached(cfg)
  keys = json.loads(precompile.receipt(cfg).read_text())["keys"]
  assert sorted(keys) == ["jit_init", "jit_train_step"]

  def no_child(*args, **kwargs):
    raise AssertionError("a child was started")
  monkeypatch.setattr(precompile.subprocess, "run", no_child)
  precompile.in_child(cfg)                                  # cached: returns at once
  precompile.in_child(config(24, seed=3))                   # a seed sweep shares the programs
  assert not precompile.cached(config(20))                  # another program: no receipt
  # A seed outside int32 is a constant of the init program: each such seed its own receipt.
  assert precompile.receipt(config(24, seed=2 ** 40)) != precompile.receipt(config(24, 2 ** 41))
  assert precompile.receipt(config(24, seed=5)) == precompile.receipt(cfg)
  entry = precompile.Path(precompile.jax.config.jax_compilation_cache_dir) / (
      keys["jit_train_step"] + "-cache")
  moved = entry.with_name(entry.name + ".moved")
  entry.rename(moved)                                       # as if the cache evicted it
  try:
    assert not precompile.cached(cfg)
  finally:
    moved.rename(entry)


def test_the_child_takes_the_resolved_config_it_is_handed_without_resolving_again(monkeypatch):
  """The parent resolved once; the child rebuilds that object from its JSON (``derived``
  included) and compiles for it: ``resolve`` is never called in the child."""
  import io
  import hybrid_jax.resolve
  from hybrid_jax.configs import is_resolved
  from hybrid_jax.configs.default import get_config
  from hybrid_jax.train import precompile

  cfg = hybrid_jax.resolve.resolve(get_config())
  cfg.derived.steps = 7                  # what a resolve in the child could not reproduce

  def no_resolve(*args, **kwargs):
    raise AssertionError("the child resolved its config again")
  monkeypatch.setattr(hybrid_jax.resolve, "resolve", no_resolve)
  compiled = []
  monkeypatch.setattr(precompile, "compile_first_programs", compiled.append)
  monkeypatch.setattr(precompile.sys, "stdin", io.StringIO(cfg.to_json()))
  before = precompile.jax.config.jax_persistent_cache_min_compile_time_secs
  try:
    assert precompile.main() == 0
  finally:
    precompile.jax.config.update("jax_persistent_cache_min_compile_time_secs", before)
  (child,) = compiled
  assert is_resolved(child) and child.derived.steps == 7
  assert json.loads(child.to_json()) == json.loads(cfg.to_json())
