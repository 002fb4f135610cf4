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
from hybrid_jax.train.config import MeshConfig, TrainConfig


class MeshError(ConfigError):
  """A mesh that the devices cannot form; the message is one line."""


def mesh_shape(mesh_cfg, n_devices: int) -> tuple[int, int]:
  """(data, fsdp) with ``-1`` filled in so that the product is the device count;
  ``mesh_cfg``: the resolved ``mesh`` section, or its MeshConfig."""
  mesh_cfg = MeshConfig.from_config(mesh_cfg)
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


def _processes(devices) -> int:
  return jax.process_count() if devices is None else len({d.process_index for d in devices})


def batch_axes(shape: tuple[int, int], rows: int) -> tuple[str, ...]:
  """The mesh axes a batch of ``rows`` is split over: every device when the rows divide
  evenly; else only ``data`` (the batch is then replicated over ``fsdp``: each FSDP group
  computes the same rows, parameters stay split); else none."""
  data, fsdp = shape
  if rows % (data * fsdp) == 0:
    return BATCH_AXES
  if data > 1 and rows % data == 0:
    return ("data",)
  return ()


def check_mesh(cfg, devices=None) -> tuple[int, int]:
  """The mesh shape of a resolved config on ``devices`` (default: this job's), or one
  MeshError line (run before anything is written). The batch, and each microbatch, is split
  over every device when it divides evenly; a smaller batch on one process is replicated
  over the FSDP axis (see ``batch_axes``)."""
  n = jax.device_count() if devices is None else len(devices)
  data, fsdp = mesh_shape(cfg.mesh, n)
  t = TrainConfig.from_config(cfg.train)
  b, k, procs = t.batch_size, t.microbatches, _processes(devices)
  axes = batch_axes((data, fsdp), b // k)
  if axes != BATCH_AXES and procs > 1:
    raise MeshError(f"config.train.batch_size: batch_size / microbatches = {b // k} must be a "
                    f"multiple of the {data * fsdp} devices of the mesh on a multi-process job")
  if b % procs:
    raise MeshError(f"config.train.batch_size: must be a multiple of the {procs} processes "
                    f"(got {b})")
  if not axes and data > 1:
    raise MeshError(f"config.train.batch_size: batch_size / microbatches = {b // k} must be a "
                    f"multiple of mesh.data={data} (or of all {data * fsdp} devices)")
  return data, fsdp


def make_mesh(mesh_cfg, devices=None) -> Mesh:
  """The (data, fsdp) mesh over ``devices``: this job's by default, or any others, such as
  a deviceless TPU topology's (``hybrid_jax.plan``) to compile for hardware not present."""
  devices = jax.devices() if devices is None else list(devices)
  shape = mesh_shape(mesh_cfg, len(devices))
  return Mesh(np.asarray(devices).reshape(shape), AXES)


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


def batch_sharding(mesh: Mesh, rows: int | None = None) -> NamedSharding:
  """Batch rows split over ``batch_axes`` (every device when ``rows`` is None)."""
  axes = BATCH_AXES if rows is None else batch_axes((mesh.shape["data"], mesh.shape["fsdp"]), rows)
  return NamedSharding(mesh, P(axes or None))


def process_rows(batch_size: int) -> range:
  """The rows of every batch this process loads (its devices' share, in device order)."""
  n, i = jax.process_count(), jax.process_index()
  per = batch_size // n
  return range(i * per, (i + 1) * per)


def global_batch(mesh: Mesh, local: dict, rows: int | None = None) -> dict:
  """This process's rows -> global arrays sharded over the batch axes (of a batch whose
  microbatches have ``rows`` rows)."""
  sharding = batch_sharding(mesh, rows)
  return {k: jax.make_array_from_process_local_data(sharding, np.asarray(v)) for k, v in local.items()}
