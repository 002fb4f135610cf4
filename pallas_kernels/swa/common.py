"""Band geometry and masking shared by the Pallas kernels (TPU and GPU).

Both kernels tile queries and keys with one block size ``c``. Query block ``i`` covers
positions ``[i*c, i*c + c)`` and needs keys ``(i*c - w, i*c + c - 1]``, i.e. key blocks
``i - n_back .. i`` with ``n_back = ceil((w - 1) / c)``: the grid (TPU) or loop (GPU) visits
only those ``n_back + 1`` blocks, so the cost is O(T * w) rather than O(T^2).
"""

import dataclasses
import math

import jax
import jax.numpy as jnp

@dataclasses.dataclass(frozen=True)
class BlockSizes:
  """The query/key block of each phase of the Pallas kernels: forward, dQ and dK/dV (as
  jax's Pallas flash attention has one per phase). Each phase tiles queries and keys with
  its own block, so each can be tuned alone; T is padded to a multiple of all three."""
  fwd: int
  dq: int
  dkv: int

  @classmethod
  def of(cls, block_size, default: int) -> "BlockSizes":
    """From None (``default`` everywhere), one int (every phase) or a BlockSizes."""
    if isinstance(block_size, cls):
      return block_size
    c = block_size or default
    return cls(c, c, c)

  def blocks(self) -> tuple[int, int, int]:
    return (self.fwd, self.dq, self.dkv)

  @property
  def pad_multiple(self) -> int:
    return math.lcm(*self.blocks())


# Finite stand-in for -inf: a fully masked row then gives exp(s - m) = exp(0) instead of
# exp(-inf + inf) = NaN; masked entries are zeroed explicitly anyway.
MASK_VALUE = -1e30


def round_up(x: int, m: int) -> int:
  return -(-x // m) * m


def next_power_of_2(x: int) -> int:
  return 1 << max(0, (x - 1).bit_length())


def blocks_back(window: int, block: int, n_blocks: int) -> int:
  """Earlier key blocks a query block can see (capped by the blocks that exist)."""
  return min(math.ceil((window - 1) / block), n_blocks - 1)


def band_mask(q_start, k_start, block_q: int, block_k: int, window: int, t: int):
  """[block_q, block_k] bool: query q_start + a sees key k_start + b (band, causal, and
  the key is not padding). ``q_start``/``k_start`` may be traced scalars."""
  qpos = q_start + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 0)
  kpos = k_start + jax.lax.broadcasted_iota(jnp.int32, (block_q, block_k), 1)
  return (kpos <= qpos) & (kpos > qpos - window) & (kpos < t)


def finalize_softmax(m, l, acc):
  """(output, row log-sum-exp) from the running max, sum and accumulator. Rows that saw no
  key (only padding rows can) give output 0 and lse 0 rather than NaN."""
  seen = l > 0
  o = acc / jnp.where(seen, l, 1.0)
  lse = jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), 0.0)
  return o, lse


def pad_axis(x, axis: int, size: int):
  """Zero-pad ``axis`` of ``x`` at the end up to ``size``."""
  if x.shape[axis] == size:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, size - x.shape[axis])
  return jnp.pad(x, widths)


def with_flash_vjp(forward, backward):
  """attend(q, k, v) = forward(q, k, v)[0], differentiated flash-attention-2 style: the
  forward saves O and the row log-sum-exp, ``backward(q, k, v, o, lse, do)`` returns dq, dk, dv."""
  @jax.custom_vjp
  def attend(q, k, v):
    return forward(q, k, v)[0]

  def attend_fwd(q, k, v):
    o, lse = forward(q, k, v)
    return o, (q, k, v, o, lse)

  def attend_bwd(res, do):
    return backward(*res, do)

  attend.defvjp(attend_fwd, attend_bwd)
  return attend
