"""The device mesh of one run: data parallelism and FSDP.

Axes ``("data", "fsdp")``: the batch is split over both (every device trains on its own
rows); parameters and optimizer state are split over ``fsdp`` along their largest
divisible dimension (ZeRO-3 style) and replicated over ``data``. XLA's SPMD partitioner
inserts the all-gathers and reduce-scatters. The sharding of every array is chosen here,
in one place, so checkpoints restore onto any other mesh shape: orbax reads each saved
array into the shardings of the mesh that restores it.
"""

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

AXES = ("data", "fsdp")
BATCH_AXES = ("data", "fsdp")       # the batch dimension is split over every device


from hybrid_jax.configs import ConfigError


class MeshError(ConfigError):
  """A mesh that the devices cannot form; the message is one line."""


def mesh_shape(mesh_cfg, n_devices: int) -> tuple[int, int]:
  """(data, fsdp) with ``-1`` filled in so that the product is the device count."""
  data, fsdp = mesh_cfg.data, mesh_cfg.fsdp
  if fsdp == -1 and data == -1:
    raise MeshError("config.mesh: at most one of mesh.data and mesh.fsdp may be -1")
  if data == -1:
    data = n_devices // fsdp if fsdp and n_devices % fsdp == 0 else 0
  if fsdp == -1:
    fsdp = n_devices // data if data and n_devices % data == 0 else 0
  if data < 1 or fsdp < 1 or data * fsdp != n_devices:
    raise MeshError(f"config.mesh: data={mesh_cfg.data} x fsdp={mesh_cfg.fsdp} does not "
                    f"cover the {n_devices} devices")
  return data, fsdp


def check_mesh(cfg) -> tuple[int, int]:
  """The mesh shape of a resolved config on this job's devices, or one MeshError line (run
  before anything is written)."""
  data, fsdp = mesh_shape(cfg.mesh, jax.device_count())
  b = cfg.train.batch_size
  if b % (data * fsdp) or b % jax.process_count():
    raise MeshError(f"config.train.batch_size: must be a multiple of the {data * fsdp} devices "
                    f"of the mesh and of the {jax.process_count()} processes (got {b})")
  return data, fsdp


def make_mesh(mesh_cfg) -> Mesh:
  shape = mesh_shape(mesh_cfg, jax.device_count())
  devices = np.asarray(jax.devices()).reshape(shape)
  return Mesh(devices, AXES)


def leaf_spec(shape: tuple, fsdp: int) -> P:
  """Split the largest dimension that ``fsdp`` divides; small or indivisible arrays (norm
  scales, step counters) stay replicated."""
  if fsdp == 1 or not shape:
    return P()
  dims = sorted(range(len(shape)), key=lambda i: -shape[i])
  for i in dims:
    if shape[i] % fsdp == 0 and shape[i] >= fsdp:
      spec = [None] * len(shape)
      spec[i] = "fsdp"
      return P(*spec)
  return P()


def state_shardings(mesh: Mesh, abstract_state):
  """NamedSharding of every leaf of the train state (params and optimizer state alike)."""
  fsdp = mesh.shape["fsdp"]
  return jax.tree.map(lambda x: NamedSharding(mesh, leaf_spec(tuple(x.shape), fsdp)),
                      abstract_state)


def replicated(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P())


def batch_sharding(mesh: Mesh) -> NamedSharding:
  return NamedSharding(mesh, P(BATCH_AXES))


def process_rows(batch_size: int) -> range:
  """The rows of every batch this process loads (its devices' share, in device order)."""
  n, i = jax.process_count(), jax.process_index()
  per = batch_size // n
  return range(i * per, (i + 1) * per)


def global_batch(mesh: Mesh, local: dict) -> dict:
  """This process's rows -> global arrays sharded over the batch axes."""
  sharding = batch_sharding(mesh)
  return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v)) for k, v in local.items()}
