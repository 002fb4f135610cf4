"""One train step (forward, backward, AdamW update) compiled for a target's devices, without
the devices: abstract state and batch, the run's mesh over the target, the compiler's memory
and cost analyses."""

import dataclasses
import math
import re
import time

import jax
import jax.numpy as jnp

from hybrid_jax.train import sharding
from hybrid_jax.train.state import abstract_state
from hybrid_jax.train.step import step_for


@dataclasses.dataclass
class Compiled:
  """Per-device figures of one compiled step (bytes; FLOPs of the whole SPMD program as the
  compiler counts them for one device)."""
  argument_bytes: int
  output_bytes: int
  temp_bytes: int
  alias_bytes: int
  code_bytes: int
  compiler_flops: float | None
  bytes_accessed: float | None
  compile_s: float
  batch_axes: tuple
  executable: object = dataclasses.field(default=None, repr=False)
  out_of_memory: str | None = None    # the TPU compiler refused the program: its line

  @property
  def hbm_bytes(self) -> int:
    """What the step needs resident on a device: inputs, outputs not aliased to inputs,
    temporaries and code."""
    return self.argument_bytes + self.output_bytes - self.alias_bytes + self.temp_bytes + self.code_bytes


def abstract_step_inputs(cfg, mesh):
  """(graphdef, rest, tx, state, batch) as shapes with their shardings: nothing is allocated."""
  graphdef, rest, tx, state, shardings = abstract_state(cfg, mesh)
  b, t = cfg.train.batch_size, cfg.data.seq_len
  bs = sharding.batch_sharding(mesh, b // cfg.train.microbatches)
  batch = dict(inputs=jax.ShapeDtypeStruct((b, t), jnp.int32, sharding=bs),
               targets=jax.ShapeDtypeStruct((b, t), jnp.int32, sharding=bs),
               answer_mask=jax.ShapeDtypeStruct((b, t), jnp.bool_, sharding=bs))
  return graphdef, rest, tx, state, shardings, batch


def planned_step(cfg, mesh):
  """(train step, abstract state, abstract batch): the step ``train`` runs (``step_for``),
  with inputs that allocate nothing."""
  graphdef, rest, tx, state, shardings, batch = abstract_step_inputs(cfg, mesh)
  return step_for(cfg, graphdef, rest, tx, mesh=mesh, state_shardings=shardings), state, batch


_UNITS = dict(B=1, K=2 ** 10, M=2 ** 20, G=2 ** 30, T=2 ** 40)


def hbm_refusal(message: str) -> int | None:
  """The temporaries a TPU compile refused for lack of HBM (it refuses rather than reports
  them), in bytes, or None for any other failure."""
  m = re.search(r"HLO temporaries \(([\d.]+)([BKMGT])\)", message)
  return None if m is None else int(float(m.group(1)) * _UNITS[m.group(2)])


def per_device_bytes(tree) -> int:
  """Bytes one device holds of sharded abstract arrays (the largest shard of each)."""
  return sum(math.prod(x.sharding.shard_shape(x.shape)) * x.dtype.itemsize
             for x in jax.tree.leaves(tree))


def _times(x, k):
  """XLA's cost analysis counts a loop body once: the microbatch scan runs it k times."""
  return None if x is None else x * k


def compile_step(cfg, devices) -> Compiled:
  """Compile the resolved config's train step over ``devices`` (any platform's, e.g. a
  deviceless TPU topology's). A TPU compile refused for lack of HBM gives a Compiled with
  ``out_of_memory`` set, its temporaries from the refusal and its arguments and outputs
  counted from the shardings; anything else the compiler raises is raised."""
  sharding.check_mesh(cfg, devices)
  mesh = sharding.make_mesh(cfg.mesh, devices)
  step, state, batch = planned_step(cfg, mesh)
  axes = sharding.batch_axes((mesh.shape["data"], mesh.shape["fsdp"]),
                             cfg.train.batch_size // cfg.train.microbatches)
  t0 = time.perf_counter()
  try:
    with jax.set_mesh(mesh):           # the kernels' contract (the step also sets it inside)
      compiled = step.lower(state, batch).compile()
  except Exception as e:
    temp = hbm_refusal(str(e))
    if temp is None:
      raise
    line = " ".join(str(e).split())
    line = line[line.find("Ran out of memory"):][:200] if "Ran out of memory" in line else line[:200]
    state_bytes = per_device_bytes(state)
    return Compiled(argument_bytes=state_bytes + per_device_bytes(batch), output_bytes=state_bytes,
                    temp_bytes=temp, alias_bytes=0, code_bytes=0, compiler_flops=None,
                    bytes_accessed=None, compile_s=time.perf_counter() - t0, batch_axes=axes,
                    out_of_memory=line)
  seconds = time.perf_counter() - t0
  mem = compiled.memory_analysis()
  cost = compiled.cost_analysis()
  cost = cost[0] if isinstance(cost, (list, tuple)) else cost
  cost = cost or {}
  return Compiled(argument_bytes=int(mem.argument_size_in_bytes),
                  output_bytes=int(mem.output_size_in_bytes),
                  temp_bytes=int(mem.temp_size_in_bytes),
                  alias_bytes=int(mem.alias_size_in_bytes),
                  code_bytes=int(mem.generated_code_size_in_bytes),
                  compiler_flops=_times(cost.get("flops"), cfg.train.microbatches),
                  bytes_accessed=_times(cost.get("bytes accessed"), cfg.train.microbatches),
                  compile_s=seconds, batch_axes=axes, executable=compiled)
