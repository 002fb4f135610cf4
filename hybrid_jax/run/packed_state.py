"""A small train state checkpointed as one flat array per part and dtype.

Why: orbax spends about 1 ms of Python per saved array, whatever its size (spec building,
asyncio tasks, garbage collection). The toy model's state is 116 arrays of 2.6 MB in all, so
a save cost ~170 ms of CPU, and the ~25 log-spaced saves of a toy run several seconds of its
~30; packed, a save is a handful of arrays (``hybrid-jax bench train`` prints both,
``checkpoint_save`` and ``checkpoint_save_per_array``).

The checkpoint then holds ``packed`` = {part: {dtype name: 1-D array}} for the state's
top-level parts (``params``, ``opt_state``), so a reader still restores the params alone,
and ``layout``: UTF-8 JSON of {part: [[path, shape, dtype], ...]} in the order the arrays
were concatenated, which makes the checkpoint readable without this module and lets a
restore refuse a state of another shape in one line instead of reshaping wrong bytes.

Only a state whose arrays are whole in every process (one device, or replicated) and small
(``PACK_MAX_BYTES``) is packed: a sharded state (FSDP over a mesh) would have to be gathered,
and a large one copied on the host, so those stay one array per leaf, as orbax writes them.
"""

import json

import jax
import numpy as np

PACKED, LAYOUT = "packed", "layout"
PACK_MAX_BYTES = 2 ** 28                 # 256 MB: above it the per-array cost is noise


def packable(state) -> bool:
  """Whether ``state`` {part: pytree} is saved packed: small, and every array whole here."""
  leaves = jax.tree.leaves(state)
  return (isinstance(state, dict) and bool(leaves) and sum(x.nbytes for x in leaves) <= PACK_MAX_BYTES
          and all(not jax.dtypes.issubdtype(x.dtype, jax.dtypes.extended)
                  and (not isinstance(x, jax.Array) or x.is_fully_replicated) for x in leaves))


def is_packed(metadata) -> bool:
  """Whether orbax's item metadata of a checkpoint (None when unreadable) is of a packed one."""
  tree = getattr(metadata, "tree", metadata)
  return tree is not None and PACKED in tree


def layout(state) -> dict:
  """{part: [[path, shape, dtype name], ...]} of a state's arrays (or abstract arrays)."""
  return {part: [[jax.tree_util.keystr(path), list(x.shape), np.dtype(x.dtype).name]
                 for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]]
          for part, tree in state.items()}


def _host(x) -> np.ndarray:
  """This process's whole copy of an array (a replicated global array's local shard)."""
  if isinstance(x, jax.Array) and not x.is_fully_addressable:
    x = x.addressable_data(0)
  return np.asarray(x)


def pack(state: dict) -> dict:
  """The checkpointed form of a ``packable`` state {part: pytree of arrays}."""
  packed = {}
  for part, tree in state.items():
    groups = {}
    for x in jax.tree.leaves(tree):
      host = _host(x)
      groups.setdefault(host.dtype.name, []).append(host.ravel())
    packed[part] = {name: np.concatenate(arrays) for name, arrays in groups.items()}
  text = json.dumps(layout(state), separators=(",", ":"))
  return {PACKED: packed, LAYOUT: np.frombuffer(text.encode(), np.uint8).copy()}


def _stored_layout(layout_bytes) -> dict:
  return json.loads(bytes(np.asarray(layout_bytes, np.uint8)).decode())


def unpack(packed: dict, layout_bytes, abstract: dict) -> dict:
  """{part: pytree} shaped like ``abstract`` {part: pytree of ShapeDtypeStruct} (each array
  placed in its ``sharding`` when it has one) from a checkpoint's ``packed`` parts; a
  ValueError naming the first difference when the checkpoint holds another layout."""
  stored, wanted = _stored_layout(layout_bytes), layout(abstract)
  out = {}
  for part, tree in abstract.items():
    have = stored.get(part)
    if have != wanted[part]:
      raise ValueError(_difference(part, have, wanted[part]))
    offsets, leaves = {}, []
    for x, (_, shape, name) in zip(jax.tree.leaves(tree), have):
      start = offsets.get(name, 0)
      size = int(np.prod(shape, dtype=np.int64))
      offsets[name] = start + size
      host = packed[part][name][start:start + size].reshape(shape)
      leaves.append(_place(host, getattr(x, "sharding", None)))
    out[part] = jax.tree.unflatten(jax.tree.structure(tree), leaves)
  return out


def _place(host: np.ndarray, sharding):
  if sharding is None:
    return jax.numpy.asarray(host)
  return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])


def _difference(part: str, have, wanted) -> str:
  if have is None:
    return f"the checkpoint has no {part!r}"
  for h, w in zip(have, wanted):
    if h != w:
      there = f"{h[1]} {h[2]}" if h[0] == w[0] else f"{part}{h[0]} {h[1]} {h[2]}"
      return f"{part}{w[0]} is {w[1]} {w[2]} here but {there} in the checkpoint"
  return f"{part} has {len(wanted)} arrays here but {len(have)} in the checkpoint"
