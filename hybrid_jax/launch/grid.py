"""Sweep files and their grids.

A sweep file defines ``get_sweep()`` returning a :class:`Sweep`: a base config plus a grid,
built from axes with :func:`product` and :func:`zip_axes`. Every grid point is a dict of
dotted overrides; its run name is derived from those values, so it is stable across
submissions and the same point always lands in the same run directory.

    from hybrid_jax.configs.default import get_config
    from hybrid_jax.launch.grid import Sweep, axis, product, zip_axes

    def get_sweep():
      return Sweep(base=get_config(), grid=product(
          axis("model.pattern", ["F", "SF"]),
          axis("model.window", [16, 64]),
          zip_axes(axis("model.size", ["toy-xs", "toy-s"]), axis("train.batch_size", [8, 4]))))
"""

import copy
import dataclasses
import itertools
import re
from pathlib import Path

import ml_collections

from hybrid_jax import overrides as config_overrides
from hybrid_jax.configs import ConfigError
from hybrid_jax.errors import UserError

Point = dict   # {"model.window": 64, ...}


class SweepError(UserError, ValueError):
  """A sweep file or grid that cannot be submitted; the message is one line."""


@dataclasses.dataclass
class Sweep:
  base: ml_collections.ConfigDict
  grid: list                                   # list of Points
  slurm: dict = dataclasses.field(default_factory=dict)   # submitit slurm_* parameters
  ray: dict = dataclasses.field(default_factory=dict)     # per-run Ray request (launch.ray_request)
  name: str | None = None


def axis(key: str, values) -> list:
  """One swept key: a list of single-key points."""
  values = list(values)
  if not values:
    raise SweepError(f"axis {key}: no values")
  return [{key: v} for v in values]


def product(*axes) -> list:
  """Every combination of the axes' points (later axes vary fastest)."""
  return [dict(kv for point in combo for kv in point.items()) for combo in itertools.product(*axes)]


def zip_axes(*axes) -> list:
  """Points taken together, position by position (the axes must have equal lengths)."""
  lengths = {len(a) for a in axes}
  if len(lengths) != 1:
    raise SweepError(f"zip_axes: axes have different lengths {sorted(lengths)}")
  return [dict(kv for point in points for kv in point.items()) for points in zip(*axes)]


def _short(key: str, keys: list[str]) -> str:
  """The last component of a dotted key, or the whole key when that is ambiguous."""
  leaf = key.rsplit(".", 1)[-1]
  return leaf if sum(k.rsplit(".", 1)[-1] == leaf for k in keys) == 1 else key


def _fmt(value) -> str:
  if isinstance(value, float):
    value = f"{value:g}"
  return re.sub(r"[^A-Za-z0-9_.+-]", "_", str(value))


def run_name(point: Point, keys: list[str]) -> str:
  """``pattern=SF,window=64``: the swept values only, in the grid's key order."""
  return ",".join(f"{_short(k, keys)}={_fmt(point[k])}" for k in keys if k in point) or "base"


def _wrong_type(value, field_type) -> str:
  return f"{type(value).__name__}; the field takes {field_type.__name__}"


def apply(base: ml_collections.ConfigDict, point: Point) -> ml_collections.ConfigDict:
  """A copy of ``base`` with the point's overrides (and extra overrides) applied: its values
  are set as given, so a sweep's string ``"None"`` stays a string (the CLI's text
  overrides are read against each field: ``hybrid_jax.overrides.apply``)."""
  cfg = copy.deepcopy(base)         # keeps field types and placeholders (to_dict would not)
  for key, value in point.items():
    config_overrides.set_key(cfg, key, value, SweepError, unknown="unknown key",
                             wrong_type=_wrong_type)
  return cfg


def _import_failed(path: Path, e: Exception) -> SweepError:
  if isinstance(e, SyntaxError):
    return SweepError(f"{path}: syntax error at line {e.lineno}: {e.msg}")
  return SweepError(f"{path}: cannot import: {type(e).__name__}: {e}".splitlines()[0])


def load_sweep(path) -> Sweep:
  """Import a sweep file and call its ``get_sweep()``; any failure is one SweepError line."""
  path = Path(path)
  module = config_overrides.import_file(
      path, "sweep", SweepError(f"sweep file {path} does not exist or is not a file"),
      lambda e: _import_failed(path, e))
  if not hasattr(module, "get_sweep"):
    raise SweepError(f"{path}: defines no get_sweep()")
  try:
    sweep = module.get_sweep()
  except SweepError:
    raise
  except Exception as e:
    raise SweepError(f"{path}: get_sweep() failed: {type(e).__name__}: {e}".splitlines()[0]) from None
  if not isinstance(sweep, Sweep):
    raise SweepError(f"{path}: get_sweep() must return hybrid_jax.launch.grid.Sweep, "
                     f"got {type(sweep).__name__}")
  if not sweep.grid:
    raise SweepError(f"{path}: the grid is empty")
  sweep.name = sweep.name or path.stem
  return sweep


@dataclasses.dataclass
class PlannedRun:
  name: str
  point: Point
  config: ml_collections.ConfigDict      # requested (unresolved) config
  resolved: ml_collections.ConfigDict | None
  error: str | None = None               # the broken rule of an invalid grid point


def plan(sweep: Sweep, overrides: Point | None = None) -> list[PlannedRun]:
  """Every grid point as a run, with ``overrides`` (``hybrid_jax.overrides.parse``'s) applied,
  validated before anything is written or submitted. An unknown key or a name clash is the
  sweep's error (SweepError; a bad override, a UserError); a point whose values break a rule
  (heads not dividing d_model, ...) is that run's error: it is reported and marked failed,
  and the rest of the grid still runs."""
  from hybrid_jax.resolve import resolve   # lazy: JAX, seconds; --help stays instant
  keys = list(dict.fromkeys(k for point in sweep.grid for k in point))
  runs, names = [], set()
  for point in sweep.grid:
    name = run_name(point, keys)
    if name in names:
      raise SweepError(f"two grid points share the run name {name!r}")
    names.add(name)
    cfg = config_overrides.apply(apply(sweep.base, point), overrides or {})   # the CLI's, as text
    try:
      runs.append(PlannedRun(name, point, cfg, resolve(cfg)))
    except ConfigError as e:
      runs.append(PlannedRun(name, point, cfg, None, str(e)))
  return runs
