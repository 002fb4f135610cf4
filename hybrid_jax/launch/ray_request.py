"""What one run asks of a Ray cluster, and how its processes are placed.

A run is one process (a Ray task holding the resources it needs: CPUs, GPUs, or the TPU
chips of a slice that fits one host) or one process per host (a placement group with a
bundle per host: a TPU slice placement group where the run names a TPU topology, a
strict-spread group otherwise). Ray's resource accounting then packs the one-process runs
onto nodes up to their capacity; nothing here schedules.

The request comes from ``--ray KEY=VALUE`` (or the sweep file's ``ray=`` dict) and, with
``--plan``, from the run's ``sweep plan`` record. TPU arithmetic (chips per host, bundles,
the pod's head resource, the generation's Ray name) is ``ray.util.tpu``'s own, so a request
is what Ray's TPU support schedules; this module only translates the project's topology
names (``v5p:2x2x1``, ``v6e:4x4``, ``h100:8``, as ``sweep plan`` spells them).
"""

import dataclasses
import json
import math
from pathlib import Path

from hybrid_jax.cli_args import key_values
from hybrid_jax.errors import UserError

# --ray keys: per process unless said otherwise.
KEYS = dict(cpus=float, gpus=float, tpu=str, slices=int, processes=int, memory=int,
            resources=dict)
# The project's chip names where Ray's differ (Ray calls v5e "v5litepod").
RAY_TPU_VERSION = {"v5e": "v5litepod"}


@dataclasses.dataclass(frozen=True)
class Placement:
  """How a run's processes are placed: ``bundles`` (one resource dict per process, in
  process-id order), the placement-group ``strategy`` (None: one plain task), and for a
  TPU slice its Ray names."""
  bundles: list
  strategy: str | None
  tpu_topology: str | None = None      # Ray's spelling: "2x2x1"
  tpu_version: str | None = None       # Ray's spelling: "v5p", "v6e", "v5litepod"
  slices: int = 1
  pod_type: str | None = None          # "v5p-8": the head resource is TPU-<pod_type>-head

  @property
  def processes(self) -> int:
    return len(self.bundles)

  @property
  def hosts_per_slice(self) -> int:
    return self.processes // self.slices

  @property
  def head_resource(self) -> str | None:
    """The resource Ray puts on worker 0 of each multi-host slice (gang reservation)."""
    return f"TPU-{self.pod_type}-head" if self.pod_type and self.hosts_per_slice > 1 else None


@dataclasses.dataclass(frozen=True)
class Request:
  cpus: float = 1.0            # per process
  gpus: float = 0.0            # per process
  tpu: str | None = None       # the run's slice, e.g. "v5p:2x2x1"
  slices: int = 1              # TPU slices (multislice: DCN between them)
  processes: int = 1           # hosts of a CPU/GPU run; a TPU run's come from its topology
  memory: int | None = None    # host bytes per process
  resources: dict = dataclasses.field(default_factory=dict)   # custom, per process

  def to_json(self) -> dict:
    return dataclasses.asdict(self)

  def placement(self) -> Placement:
    """The bundles this run asks for (one-line UserError for a topology Ray cannot place)."""
    base = {"CPU": self.cpus, **({"GPU": self.gpus} if self.gpus else {}),
            **({"memory": self.memory} if self.memory else {}), **self.resources}
    if not self.tpu:
      strategy = "STRICT_SPREAD" if self.processes > 1 else None
      return Placement([dict(base) for _ in range(self.processes)], strategy)
    from ray.util import tpu as ray_tpu
    version, topology = ray_tpu_names(self.tpu)
    hosts, bundle = ray_tpu.get_tpu_worker_resources(
        topology, version, resources_per_worker=dict(base, TPU=ray_tpu.get_chips_per_host(
            topology, version)), num_slices=self.slices)
    return Placement([dict(bundle) for _ in range(hosts)],
                     None if hosts == 1 else "SPREAD",      # SlicePlacementGroup's default
                     topology, version, self.slices,
                     ray_tpu.infer_tpu_pod_type_from_topology(topology, version))


def ray_tpu_names(topology: str) -> tuple[str, str]:
  """("v5p", "2x2x1") from the project's "v5p:2x2x1"; one UserError line otherwise."""
  from pallas_kernels.targets import TargetError, parse
  from ray._private.accelerators.tpu import TPUAcceleratorManager
  try:
    chip, shape = parse(topology)
  except TargetError as e:
    raise UserError(f"--ray tpu={topology}: {e}") from None
  version, dims = RAY_TPU_VERSION.get(chip, chip), "x".join(map(str, shape))
  if not TPUAcceleratorManager.is_valid_tpu_accelerator_topology(version, dims):
    raise UserError(f"--ray tpu={topology}: not a {chip} topology Ray can place "
                    f"(ray.util.tpu: {version} {dims})")
  return version, dims


def parse_options(items: list[str], base: dict | None = None) -> dict:
  """``--ray KEY=VALUE`` items over the sweep file's ``ray=`` dict, checked: one UserError
  line for an unknown key or a value of the wrong type."""
  out = dict(base or {}, **key_values(items, "--ray"))
  for key, value in out.items():
    if key not in KEYS:
      raise UserError(f"--ray {key}: unknown key (one of {', '.join(KEYS)})")
    kind = KEYS[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
      out[key] = value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
      raise UserError(f"--ray {key}={value!r}: takes a {kind.__name__}")
  if out.get("processes", 1) < 1 or out.get("slices", 1) < 1:
    raise UserError("--ray processes and slices must be >= 1")
  return out


def read_plan(path) -> dict[str, dict]:
  """{run name: record} of a ``sweep plan`` output (.plan.jsonl); one line on a bad file."""
  path = Path(path)
  try:
    lines = path.read_text().splitlines()
  except OSError as e:
    raise UserError(f"--plan {path}: cannot read it ({e.strerror})") from None
  records = {}
  for number, line in enumerate(lines, 1):
    if not line.strip():
      continue
    try:
      record = json.loads(line)
      records[record["run"]] = record
    except (ValueError, KeyError, TypeError):
      raise UserError(f"--plan {path}:{number}: not a sweep plan record") from None
  return records


def from_plan(record: dict, options: dict) -> dict:
  """The options a run's plan record implies (its topology, and the host memory of its
  state), under the explicit ``--ray`` options, which win."""
  from pallas_kernels.targets import CHIPS, parse
  chip, shape = parse(record["topology"])
  out = {}
  if CHIPS[chip].platform == "tpu":
    out["tpu"] = record["topology"]
  else:
    out["gpus"] = float(math.prod(shape))
  hosts = Request(**{**out, **options}).placement().hosts_per_slice
  if record.get("hbm_argument_bytes"):
    # The host copy of the state a checkpoint save stages: its devices' arguments, per host.
    out["memory"] = int(record["hbm_argument_bytes"] * record["devices"] // hosts)
  return {**out, **options}


def requests(run_names: list[str], options: dict, plans: list[dict] | None = None,
             log=print) -> dict[str, Request]:
  """Every run's request. With plans (one per topology, in order of preference), a run
  takes the first record that fits it; a run no plan fits, or none has, is an error
  before anything is submitted. A fit the planner found only by changing the config
  (``change``: more microbatches) is said, not applied: the sweep file holds the config."""
  out = {}
  for name in run_names:
    opts = options
    if plans:
      records = [p[name] for p in plans if name in p]
      if not records:
        raise UserError(f"--plan: no record of run {name} (plan the same sweep file)")
      record = next((r for r in records if r.get("fits") is not False), None)
      if record is None:
        raise UserError(f"--plan: run {name} fits no planned topology ("
                        + "; ".join(f"{r.get('topology')}: {r.get('reason') or r.get('status')}"
                                    for r in records) + ")")
      if record.get("change"):
        log(f"plan: {name} fits {record['topology']} only with {record['change']}, which this "
            "submission does not apply (set it in the sweep file)")
      opts = from_plan(record, options)
    request = Request(**opts)
    request.placement()                       # a topology Ray cannot place: one line, now
    out[name] = request
  return out
