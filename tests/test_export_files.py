"""``export hf`` without torch or transformers (tests/test_export_hf.py checks the export
against them): the files it writes, with the parameters and one file mode, and a missing
safetensors named in one line before anything is written."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import load_file

from conftest import tiny_config
from hybrid_jax import cli, load_run
from hybrid_jax.resolve import resolve
from hybrid_jax.standard_run import train

FILES = {"config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
         "tokenizer_config.json"}
# The export run in a process where importing torch or transformers fails.
WITHOUT_TORCH = ("import sys; sys.modules.update(torch=None, transformers=None); "
                 "from hybrid_jax import cli; sys.exit(cli.main(sys.argv[1:]))")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
  workdir = tmp_path_factory.mktemp("export") / "run"
  train(tiny_config("SF", steps=2), workdir, progress=False)
  return workdir


def test_export_needs_neither_torch_nor_transformers_and_writes_every_file_alike(run, tmp_path):
  out = tmp_path / "hf"
  umask = os.umask(0o022)
  try:
    proc = subprocess.run([sys.executable, "-c", WITHOUT_TORCH, "export", "hf", "--workdir",
                           str(run), "--out", str(out)], capture_output=True, text=True)
  finally:
    os.umask(umask)
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert {p.name for p in out.iterdir()} == FILES
  modes = {p.name: oct(p.stat().st_mode & 0o777) for p in out.iterdir()}
  assert set(modes.values()) == {"0o644"}, modes
  _, model = load_run(run)
  weights = load_file(out / "model.safetensors")
  np.testing.assert_array_equal(weights["model.embed_tokens.weight"],
                                np.asarray(model.embed.embedding[...], np.float32))
  assert json.loads((out / "config.json").read_text())["architectures"] == ["SmolLM3ForCausalLM"]


def test_a_missing_safetensors_is_one_line_naming_the_install_before_anything_is_written(
    tmp_path, capsys, monkeypatch):
  workdir = tmp_path / "run"
  workdir.mkdir()
  (workdir / "config.json").write_text(resolve(tiny_config("SF")).to_json())
  monkeypatch.setitem(sys.modules, "safetensors", None)
  monkeypatch.setitem(sys.modules, "safetensors.numpy", None)
  out = tmp_path / "hf"
  assert cli.main(["export", "hf", "--workdir", str(workdir), "--out", str(out)]) == 2
  err = capsys.readouterr().err.strip()
  assert err.count("\n") == 0 and "safetensors" in err and "pip install" in err, err
  assert not out.exists() and not list(tmp_path.glob(".hf*"))
