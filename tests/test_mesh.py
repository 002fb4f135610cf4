"""Mesh sharding on forced host devices: data parallel and FSDP give the 1-device losses,
parameters really are split, and checkpoints restore onto other meshes and device counts.

Each configuration runs in its own process, since the device count is fixed when JAX starts.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from hybrid_jax.bench.mesh import host_devices_env

STEPS = 20

PROBE = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {tests!r})
    import jax
    from conftest import tiny_config
    from hybrid_jax.resolve import resolve
    from hybrid_jax.train import sharding
    from hybrid_jax.train.state import init_state
    from hybrid_jax.standard_run import train
    from hybrid_jax.run import RunDir
    c = tiny_config(steps={steps})
    c.model.d_model, c.model.n_heads, c.model.n_kv_heads = 64, 4, 2
    c.train.batch_size = 8
    c.train.log_every = 1
    c.checkpoint.every = 10
    c.mesh.data, c.mesh.fsdp = {data}, {fsdp}
    cfg = resolve(c)
    mesh = sharding.make_mesh(cfg.mesh)
    _, _, state, _, _ = init_state(cfg, mesh)
    kernel = state["params"]["blocks"][0]["mlp"]["up"]["kernel"].value
    mu = jax.tree.leaves(state["opt_state"])[1]
    train(c, {workdir!r}, progress=False)
    print(json.dumps(dict(
        devices=jax.device_count(),
        losses=[r["loss"] for r in RunDir({workdir!r}).read_metrics()],
        kernel_shape=list(kernel.shape),
        kernel_shard=list(kernel.addressable_shards[0].data.shape),
        kernel_spec=str(kernel.sharding.spec),
        mu_shard=list(mu.addressable_shards[0].data.shape), mu_shape=list(mu.shape))))
    """)


def probe(workdir, data=-1, fsdp=1, devices=8):
  env = host_devices_env(devices)
  code = PROBE.format(tests=os.path.dirname(__file__), steps=STEPS, data=data, fsdp=fsdp,
                      workdir=str(workdir))
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                     timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  return probe(tmp_path_factory.mktemp("ref") / "run", devices=1)


@pytest.fixture(scope="module")
def fsdp_run(tmp_path_factory):
  """The data 2 x fsdp 4 run: a mesh compared below, and the checkpoints resumed on others."""
  workdir = tmp_path_factory.mktemp("fsdp") / "run"
  return workdir, probe(workdir, 2, 4)


@pytest.mark.parametrize("data,fsdp", [(8, 1), (1, 8), (2, 4)])
def test_meshes_match_one_device_and_shard_the_parameters(tmp_path, reference, data, fsdp, request):
  out = (request.getfixturevalue("fsdp_run")[1] if (data, fsdp) == (2, 4)
         else probe(tmp_path / "run", data, fsdp))
  assert out["devices"] == 8 and len(out["losses"]) == STEPS
  np.testing.assert_allclose(out["losses"], reference["losses"], rtol=2e-4)
  rows, cols = out["kernel_shape"]
  if fsdp == 1:
    assert out["kernel_shard"] == out["kernel_shape"]             # replicated (pure DP)
  else:
    assert "fsdp" in out["kernel_spec"]
    assert out["kernel_shard"][0] * out["kernel_shard"][1] * fsdp == rows * cols
    assert np.prod(out["mu_shard"]) * fsdp == np.prod(out["mu_shape"])   # optimizer state too


def test_checkpoint_saved_on_one_mesh_resumes_on_others(tmp_path, reference, fsdp_run):
  saved, unbroken = fsdp_run
  shutil.copytree(saved, tmp_path / "saved")
  ckpts = tmp_path / "saved" / "checkpoints"
  for p in ckpts.iterdir():            # forget everything after step 11: resume from there
    if p.name.isdigit() and int(p.name) > 11:
      shutil.rmtree(p)
  (tmp_path / "saved" / "status.json").unlink()
  assert max(int(p.name) for p in ckpts.iterdir() if p.name.isdigit()) == 11
  for name, (data, fsdp, devices) in {"one": (1, 1, 1), "other": (4, 2, 8)}.items():
    shutil.copytree(tmp_path / "saved", tmp_path / name)
    out = probe(tmp_path / name, data, fsdp, devices)
    assert len(out["losses"]) == STEPS
    np.testing.assert_allclose(out["losses"][:11], unbroken["losses"][:11], rtol=0)   # kept
    np.testing.assert_allclose(out["losses"], unbroken["losses"], rtol=2e-4)
    np.testing.assert_allclose(out["losses"], reference["losses"], rtol=2e-4)


MULTI = textwrap.dedent("""
    import json, sys
    sys.path.insert(0, {tests!r})
    from hybrid_jax.train import distributed
    distributed.initialize()            # before anything starts a JAX backend
    import jax
    from conftest import tiny_config
    from hybrid_jax.standard_run import train
    c = tiny_config(steps={steps})
    c.model.d_model, c.model.n_heads, c.model.n_kv_heads = 64, 4, 2
    c.train.batch_size = 8
    c.train.log_every = 1
    c.checkpoint.every = 10
    status = train(c, {workdir!r}, progress=False)
    print(json.dumps(dict(process=jax.process_index(), processes=jax.process_count(),
                          devices=jax.device_count(), state=status["state"])))
    """)


def test_two_processes_train_the_run_one_process_trains(tmp_path, reference):
  import socket
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
  workdir = tmp_path / "run"
  code = MULTI.format(tests=os.path.dirname(__file__), steps=STEPS, workdir=str(workdir))
  procs = []
  for i in range(2):
    env = dict(os.environ, JAX_PLATFORMS="cpu", HYBRID_JAX_COORDINATOR=f"127.0.0.1:{port}",
               HYBRID_JAX_NUM_PROCESSES="2", HYBRID_JAX_PROCESS_ID=str(i))
    env.pop("XLA_FLAGS", None)
    procs.append(subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env=env))
  outs = [p.communicate(timeout=600) for p in procs]
  for p, (out, err) in zip(procs, outs):
    assert p.returncode == 0, err[-3000:]
  infos = [json.loads(out.strip().splitlines()[-1]) for out, _ in outs]
  assert [i["process"] for i in infos] == [0, 1]
  assert all(i["processes"] == 2 and i["devices"] == 2 and i["state"] == "done" for i in infos), infos
  from hybrid_jax.run import RunDir
  losses = [r["loss"] for r in RunDir(workdir).read_metrics()]   # written by process 0 only
  assert len(losses) == STEPS
  np.testing.assert_allclose(losses, reference["losses"], rtol=2e-4)
  assert max(int(p.name) for p in (workdir / "checkpoints").iterdir() if p.name.isdigit()) == STEPS


def test_bench_mesh_reports_fsdp_splitting_the_parameter_bytes():
  from hybrid_jax.bench import mesh as mesh_bench
  one, fsdp8 = mesh_bench.run(1, 1, 1, steps=1), mesh_bench.run(8, 1, 8, steps=1)
  assert fsdp8["devices"] == 8 and fsdp8["step_s"] > 0
  ratio = fsdp8["param_bytes_per_device"] / one["param_bytes_per_device"]
  assert 1 / 8 <= ratio < 0.2, ratio       # ~1/8: only small norm scales stay replicated
  assert fsdp8["state_bytes_per_device"] < 0.2 * one["state_bytes_per_device"]


COLLECTIVES = textwrap.dedent("""
    import json, re, sys
    sys.path.insert(0, {tests!r})
    import jax
    from conftest import tiny_config
    from hybrid_jax.data import make_source
    from hybrid_jax.resolve import resolve
    from hybrid_jax.train import sharding
    from hybrid_jax.train.state import init_state
    from hybrid_jax.train.step import make_train_step
    c = tiny_config(steps=2)
    c.train.batch_size = 4
    c.mesh.data, c.mesh.fsdp = {data}, {fsdp}
    cfg = resolve(c)
    mesh = sharding.make_mesh(cfg.mesh)
    graphdef, rest, state, tx, _ = init_state(cfg, mesh)
    step = make_train_step(graphdef, rest, tx, mesh=mesh, batch_size=4,
                           state_shardings=sharding.state_shardings(mesh, state))
    batch = sharding.global_batch(mesh, make_source(cfg).batch(0))
    hlo = step.lower(state, batch).compile().as_text()
    print(json.dumps(dict(all_reduce=len(re.findall(r"all-reduce(?:-start)?\\(", hlo)))))
    """)


@pytest.mark.parametrize("data,fsdp,flat", [(2, 1, True), (1, 2, False)])
def test_cpu_data_parallel_reduces_the_gradients_in_one_all_reduce(data, fsdp, flat):
  """XLA:CPU runs one all-reduce per parameter (gloo between processes: ~4 ms each), so a
  pure data-parallel CPU step sums one flat vector of gradients and metrics; FSDP keeps
  XLA's collectives. (That the losses equal one device's: the tests above.)"""
  env = host_devices_env(2)
  code = COLLECTIVES.format(tests=os.path.dirname(__file__), data=data, fsdp=fsdp)
  r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                     timeout=600)
  assert r.returncode == 0, r.stderr[-3000:]
  n = json.loads(r.stdout.strip().splitlines()[-1])["all_reduce"]
  assert (n == 1) if flat else (n > 1), n
