"""``hybrid-jax plan`` input errors are one line before any compile, and the mesh is built
from the devices it is given (a topology's), not from this host's."""

import dataclasses
import importlib.util

import pytest

from conftest import tiny_config
from hybrid_jax.resolve import resolve
from hybrid_jax.train import sharding


def _run(argv, capsys, sweep=False):
  from hybrid_jax import cli
  code = cli.main((["sweep", "plan"] if sweep else ["plan"]) + argv)
  err = capsys.readouterr().err.strip()
  return code, err


@pytest.mark.parametrize("topology,match", [
    ("v9z:2x2", "unknown topology 'v9z:2x2': expected <chip>:<shape>"),
    ("v5p", "unknown topology 'v5p': v5p slices have 3 dimensions"),
    ("v5p:2x2", "v5p slices have 3 dimensions"),
    ("h100:2x4", "a GPU target is <gpu>:<n GPUs>"),
])
def test_unknown_topology_is_one_line(topology, match, capsys, tmp_path):
  code, err = _run(["--topology", topology, "--out", str(tmp_path / "p.jsonl")], capsys)
  assert code == 2 and match in err and len(err.splitlines()) == 1
  assert not (tmp_path / "p.jsonl").exists()


def test_config_failing_validation_is_one_line(capsys, tmp_path):
  code, err = _run(["--topology", "v5p:2x2x1", "--config.model.window=0",
                    "--out", str(tmp_path / "p.jsonl")], capsys)
  assert code == 2 and "config.model.window: must be an integer >= 1" in err
  assert len(err.splitlines()) == 1 and not (tmp_path / "p.jsonl").exists()


def test_missing_libtpu_says_how_to_install_it(capsys, monkeypatch, tmp_path):
  import jax
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "libtpu" else real(name, *a))
  code, err = _run(["--topology", "v5e:2x2", "--out", str(tmp_path / "p.jsonl")], capsys)
  assert code == 2 and len(err.splitlines()) == 1
  assert f'pip install "jax[tpu]=={jax.__version__}"' in err


def test_missing_cuda_plugin_says_how_to_install_it(capsys, monkeypatch, tmp_path):
  import jax
  real = importlib.util.find_spec
  monkeypatch.setattr(importlib.util, "find_spec",
                      lambda name, *a: None if name == "jax_cuda12_plugin" else real(name, *a))
  code, err = _run(["--topology", "h100:8", "--out", str(tmp_path / "p.jsonl")], capsys)
  assert code == 2 and len(err.splitlines()) == 1
  assert f'pip install "jax-cuda12-plugin=={jax.__version__}"' in err


def test_sweep_plan_bad_sweep_file_is_one_line(capsys, tmp_path):
  code, err = _run([str(tmp_path / "missing.py"), "--topology", "v5p:2x2x1"], capsys, sweep=True)
  assert code == 2 and "does not exist" in err and len(err.splitlines()) == 1


@dataclasses.dataclass(frozen=True)
class FakeDevice:
  id: int
  process_index: int = 0


def test_mesh_and_its_check_use_the_given_devices_not_the_hosts():
  devices = [FakeDevice(i) for i in range(8)]
  c = tiny_config()
  c.train.batch_size, c.mesh.data, c.mesh.fsdp = 16, 2, 4
  cfg = resolve(c)
  assert sharding.check_mesh(cfg, devices) == (2, 4)
  mesh = sharding.make_mesh(cfg.mesh, devices)
  assert dict(mesh.shape) == dict(data=2, fsdp=4)
  assert [d.id for d in mesh.devices.flat] == list(range(8))


@pytest.mark.parametrize("batch,microbatches,data,fsdp,axes", [
    (16, 1, 2, 4, ("data", "fsdp")),
    (2, 1, 1, 8, ()),                  # pure FSDP, a batch smaller than the devices: replicated
    (4, 1, 2, 4, ("data",)),
    (16, 4, 2, 4, ("data",)),          # each microbatch of 4 rows
])
def test_batch_axes_split_what_divides(batch, microbatches, data, fsdp, axes):
  devices = [FakeDevice(i) for i in range(8)]
  c = tiny_config()
  c.train.batch_size, c.train.microbatches, c.mesh.data, c.mesh.fsdp = batch, microbatches, data, fsdp
  cfg = resolve(c)
  sharding.check_mesh(cfg, devices)
  assert sharding.batch_axes((data, fsdp), batch // microbatches) == axes


@pytest.mark.parametrize("batch,data,procs,match", [
    (3, 2, 1, "must be a multiple of mesh.data=2"),
    (2, 1, 2, "on a multi-process job"),
])
def test_batches_that_cannot_be_split_are_one_line(batch, data, procs, match):
  devices = [FakeDevice(i, i * procs // 8) for i in range(8)]
  c = tiny_config()
  c.train.batch_size, c.mesh.data, c.mesh.fsdp = batch, data, -1
  with pytest.raises(sharding.MeshError, match=match) as e:
    sharding.check_mesh(resolve(c), devices)
  assert "\n" not in str(e.value)


def test_plan_commands_are_registered(capsys, tmp_path):
  from hybrid_jax import cli
  assert cli.main(["sweep", "plan", str(tmp_path / "missing.py"), "--topology", "v5p:2x2x1"]) == 2
  assert "hybrid-jax: error: sweep plan:" in capsys.readouterr().err
  assert cli.main(["plan", "--topology", "nope:1"]) == 2
  assert "hybrid-jax: error: plan: unknown topology" in capsys.readouterr().err
