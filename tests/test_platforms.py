"""The first minute says what it does: a host without a TPU or GPU keeps JAX off the installed
accelerator plugins (once said why), and ``train`` says whether it compiles its step or
loads it from the compile cache, and where that cache is."""

import os
import subprocess
import sys

import pytest

from hybrid_jax import platforms


@pytest.fixture
def bare_host(monkeypatch):
  monkeypatch.delenv("JAX_PLATFORMS", raising=False)
  monkeypatch.setattr(platforms, "accelerator_present", lambda: False)
  monkeypatch.setattr(platforms, "installed_plugins", lambda: ["TPU"])


def test_a_host_command_without_an_accelerator_keeps_jax_on_the_cpu_and_says_why(bare_host):
  said = []
  assert platforms.keep_jax_on_cpu("train", said.append)
  assert os.environ["JAX_PLATFORMS"] == "cpu"
  assert len(said) == 1 and "no TPU or GPU on this host" in said[0] and "TPU plugin" in said[0]


@pytest.mark.parametrize("case", ["plan", "sweep", "user chose", "device present", "no plugin"])
def test_plan_sweep_a_users_choice_a_device_or_no_plugin_are_left_alone(bare_host, monkeypatch, case):
  command = case if case in ("plan", "sweep") else "train"
  if case == "user chose":
    monkeypatch.setenv("JAX_PLATFORMS", "tpu,cpu")
  if case == "device present":
    monkeypatch.setattr(platforms, "accelerator_present", lambda: True)
  if case == "no plugin":
    monkeypatch.setattr(platforms, "installed_plugins", lambda: [])
  before = os.environ.get("JAX_PLATFORMS")
  said = []
  assert not platforms.keep_jax_on_cpu(command, said.append)
  assert os.environ.get("JAX_PLATFORMS") == before and not said


def _train(tmp_path, name, env):
  return subprocess.run([sys.executable, "-m", "hybrid_jax.cli", "train", "--workdir",
                         str(tmp_path / name), "--config.train.tokens=4096", "--config.train.log_every=1"],
                        env=env, capture_output=True, text=True, timeout=600)


def test_train_says_it_compiles_then_that_it_loads_from_the_cache(tmp_path):
  cache = tmp_path / "cache"
  env = dict(os.environ, JAX_PLATFORMS="cpu", JAX_COMPILATION_CACHE_DIR=str(cache),
             HYBRID_JAX_PRECOMPILE="1")
  first = _train(tmp_path, "a", env)
  assert first.returncode == 0, first.stderr[-2000:]
  assert f"hybrid-jax: compiling the train step into the compile cache {cache}" in first.stderr
  second = _train(tmp_path, "b", env)
  assert f"hybrid-jax: loading the train step from the compile cache {cache}" in second.stderr


def test_train_on_a_host_without_an_accelerator_starts_no_plugin(tmp_path):
  if not platforms.installed_plugins():
    pytest.skip("no accelerator plugin (libtpu, jax-cuda12-plugin) is installed here")
  if platforms.accelerator_present():
    pytest.skip("this host has an accelerator")
  env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
  env["JAX_COMPILATION_CACHE_DIR"] = str(tmp_path / "cache")
  r = _train(tmp_path, "run", env)
  assert r.returncode == 0, r.stderr[-2000:]
  lines = r.stderr.splitlines()
  assert sum("no TPU or GPU on this host" in l for l in lines) == 1
  assert not [l for l in lines if l.startswith(("E0000", "W0000", "Traceback"))], r.stderr[-2000:]


def test_a_sweep_worker_on_a_host_without_an_accelerator_starts_no_plugin(tmp_path):
  """A sweep's run trains in ``hybrid_jax.launch.worker`` (every backend), not through the
  train command: it keeps JAX off the plugins too, so no run's train.log opens with the CUDA
  plugin's traceback."""
  import json
  from hybrid_jax.configs.default import get_config
  if not platforms.installed_plugins():
    pytest.skip("no accelerator plugin (libtpu, jax-cuda12-plugin) is installed here")
  if platforms.accelerator_present():
    pytest.skip("this host has an accelerator")
  cfg = get_config()
  cfg.train.tokens, cfg.train.log_every = 4096, 1
  run = tmp_path / "run"
  run.mkdir()
  (run / "launch.json").write_text(json.dumps({"config": cfg.to_dict(), "point": {}}))
  env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}
  env["JAX_COMPILATION_CACHE_DIR"] = str(tmp_path / "cache")
  r = subprocess.run([sys.executable, "-m", "hybrid_jax.launch.worker", str(run)], env=env,
                     capture_output=True, text=True, timeout=600)
  assert r.returncode == 0, r.stderr[-2000:]
  lines = r.stderr.splitlines()
  assert sum("no TPU or GPU on this host" in l for l in lines) == 1
  assert not [l for l in lines if l.startswith(("E0000", "W0000", "Traceback", "ERROR:jax"))], r.stderr[-2000:]
