"""Dispatch by target, not host (pallas_kernels.dispatch), on CPU without any accelerator
compiler: the target comes from ``compile_for``, then the mesh in context, then the host;
the batch axes a kernel call is split over; and a kernel under a multi-device CPU mesh runs
per device and still matches the XLA path."""

import subprocess
import sys
import textwrap

import jax
import pytest
from jax.sharding import AbstractMesh

from pallas_kernels import dispatch


def test_host_default_is_cpu_and_interprets():
  assert dispatch.target_platform() == "cpu"
  assert dispatch.resolve("auto") == ("xla", False)
  assert dispatch.resolve("pallas_tpu") == ("pallas_tpu", True)


@pytest.mark.parametrize("platform,kernel", [("tpu", "pallas_tpu"), ("cuda", "pallas_gpu"),
                                             ("gpu", "pallas_gpu"), ("cpu", "xla")])
def test_compile_for_names_the_target_and_compiles_rather_than_interprets(platform, kernel):
  with dispatch.compile_for(platform):
    assert dispatch.resolve("auto") == (kernel, False)
  assert dispatch.resolve("auto") == ("xla", False)          # restored on exit


def test_compile_for_rejects_an_unknown_platform():
  with pytest.raises(ValueError, match="platform"):
    with dispatch.compile_for("npu"):
      pass


def test_the_other_accelerators_kernel_is_an_error_unless_interpreted():
  with dispatch.compile_for("tpu"):
    with pytest.raises(ValueError, match="pallas_gpu.*compiled for tpu"):
      dispatch.resolve("pallas_gpu")
    assert dispatch.resolve("pallas_gpu", True) == ("pallas_gpu", True)


def test_target_follows_the_abstract_mesh_in_context():
  """A mesh's abstract device names the platform (a deviceless topology's does too)."""
  make = getattr(jax.sharding, "AbstractDevice", None)
  if make is None:
    pytest.skip("this jax has no jax.sharding.AbstractDevice")
  device = make(device_kind="NVIDIA H100", num_cores=None, platform="gpu")
  mesh = AbstractMesh((2, 4), ("data", "fsdp"), abstract_device=device)
  with jax.sharding.use_abstract_mesh(mesh):
    assert dispatch.target_platform() == "gpu"
    assert dispatch.resolve("auto") == ("pallas_gpu", False)


@pytest.mark.parametrize("batch,axes", [(8, ("data", "fsdp")), (16, ("data", "fsdp")),
                                        (4, ("data",)), (2, ("data",)), (1, ())])
def test_batch_axes_split_what_divides(batch, axes):
  mesh = AbstractMesh((2, 4), ("data", "fsdp"))
  assert dispatch.batch_axes(batch, mesh) == axes
  n = {(): 1, ("data",): 2, ("data", "fsdp"): 8}[axes]
  assert dispatch.per_device_shape((batch, 5), mesh) == (batch // n, 5)


def test_batch_axes_skip_size_one_and_unknown_axes():
  assert dispatch.batch_axes(8, AbstractMesh((1, 4), ("data", "fsdp"))) == ("fsdp",)
  assert dispatch.batch_axes(8, AbstractMesh((4,), ("model",))) == ()


def test_kernels_under_a_cpu_mesh_run_per_device_and_match_xla():
  """Four host devices, batch split over fsdp: each interpreted kernel sees one row (its
  traced shapes say so) and the result equals the XLA path, forward and gradient."""
  script = textwrap.dedent("""
      import jax, jax.numpy as jnp, numpy as np
      from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
      from pallas_kernels.swa import api, pallas_tpu
      seen = []
      real = pallas_tpu.sliding_window_attention
      def spy(q, *a, **k):
        seen.append(q.shape)
        return real(q, *a, **k)
      api._PALLAS["pallas_tpu"] = type(pallas_tpu)("spy")
      api._PALLAS["pallas_tpu"].sliding_window_attention = spy
      mesh = Mesh(np.array(jax.devices()).reshape(1, 4), ("data", "fsdp"))
      ks = jax.random.split(jax.random.PRNGKey(0), 3)
      q, k, v = (jax.random.normal(kk, (4, 24, 2, 8)) for kk in ks)
      loss = lambda impl: lambda q, k, v: jnp.sum(
          api.sliding_window_attention(q, k, v, window=5, implementation=impl) ** 2)
      with jax.set_mesh(mesh):
        x = [jax.device_put(a, NamedSharding(mesh, P(("data", "fsdp")))) for a in (q, k, v)]
        got = jax.jit(jax.value_and_grad(loss("pallas_tpu"), argnums=(0, 1, 2)))(*x)
      want = jax.value_and_grad(loss("xla"), argnums=(0, 1, 2))(q, k, v)
      for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(a, b, rtol=2e-5, atol=2e-5)
      assert seen and all(s[0] == 1 for s in seen), seen
      print("OK", seen)
      """)
  from hybrid_jax.bench.mesh import host_devices_env
  env = host_devices_env(4)
  run = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                       timeout=600)
  assert run.returncode == 0 and "OK" in run.stdout, run.stderr[-3000:]
