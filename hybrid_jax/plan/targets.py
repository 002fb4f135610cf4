"""Accelerator targets: per-chip peak figures and the devices of a deviceless topology.

``--topology v5p:2x2x1`` names a TPU generation and its chip grid. libtpu describes a TPU
slice without the hardware (``jax.experimental.topologies``); it refuses slices smaller than
a host's chip grid, so a single chip is taken from the smallest slice.
"""

import dataclasses
import math
import re

GIB = 1024 ** 3


class TargetError(ValueError):
  """A topology that cannot be planned for; the message is one line."""


@dataclasses.dataclass(frozen=True)
class Chip:
  """Public per-chip peaks: dense bf16 FLOP/s, HBM bandwidth (bytes/s) and capacity."""
  name: str
  platform: str
  peak_bf16_flops: float
  hbm_bandwidth: float
  hbm_bytes: float
  host_grid: str = ""         # the smallest slice libtpu describes (TPU)


CHIPS = {
    "v4": Chip("v4", "tpu", 275e12, 1.2e12, 32 * GIB, "2x2x1"),
    "v5e": Chip("v5e", "tpu", 197e12, 0.819e12, 16 * GIB, "2x2"),
    "v5p": Chip("v5p", "tpu", 459e12, 2.765e12, 95 * GIB, "2x2x1"),
    "v6e": Chip("v6e", "tpu", 918e12, 1.64e12, 32 * GIB, "2x2"),
    "h100": Chip("h100", "gpu", 989e12, 3.35e12, 80e9),
    "h200": Chip("h200", "gpu", 989e12, 4.8e12, 141e9),
}


@dataclasses.dataclass
class Target:
  """The devices to compile for and what each holds and does (a TPU v4 chip shows up as
  two devices in a deviceless topology: the chip's figures are shared between them)."""
  name: str
  chip: Chip
  chips: int
  devices: list

  @property
  def devices_per_chip(self) -> float:
    return len(self.devices) / self.chips

  @property
  def hbm_per_device(self) -> float:
    return self.chip.hbm_bytes / self.devices_per_chip

  @property
  def peak_flops_per_device(self) -> float:
    return self.chip.peak_bf16_flops / self.devices_per_chip

  @property
  def hbm_bandwidth_per_device(self) -> float:
    return self.chip.hbm_bandwidth / self.devices_per_chip


def parse(name: str) -> tuple[Chip, list[int]]:
  """``v5p:2x2x1`` -> (the v5p chip, [2, 2, 1]); one TargetError line otherwise."""
  m = re.fullmatch(r"([a-z0-9]+):(\d+(?:x\d+)*)", name.strip().lower())
  if not m or m.group(1) not in CHIPS:
    raise TargetError(f"unknown topology {name!r}: expected CHIP:AxB[xC] with CHIP one of "
                      f"{', '.join(CHIPS)} (e.g. v5p:2x2x1, v5e:2x2, h100:1x8)")
  dims = [int(d) for d in m.group(2).split("x")]
  if min(dims) < 1:
    raise TargetError(f"topology {name!r}: every dimension must be >= 1")
  return CHIPS[m.group(1)], dims


def libtpu_missing() -> str | None:
  """Why libtpu cannot be used (with the command that installs it), or None."""
  import importlib.util
  if importlib.util.find_spec("libtpu") is None:
    import jax
    return (f"libtpu is not installed, so TPU topologies cannot be compiled for; install it "
            f"with: pip install \"jax[tpu]=={jax.__version__}\"")
  return None


def tpu_target(name: str) -> Target:
  chip, dims = parse(name)
  if chip.platform != "tpu":
    raise TargetError(f"topology {name!r} is a GPU; GPU targets are not supported yet")
  if (why := libtpu_missing()) is not None:
    raise TargetError(why)
  import os
  os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")   # other processes may hold libtpu
  from jax.experimental import topologies
  chips = math.prod(dims)
  host = [int(d) for d in chip.host_grid.split("x")]
  small = chips < math.prod(host) and all(d <= h for d, h in zip(dims, host))
  grid = chip.host_grid if small else "x".join(map(str, dims))
  if len(host) != len(dims):
    raise TargetError(f"topology {name!r}: {chip.name} slices have {len(host)} dimensions "
                      f"(e.g. {chip.name}:{chip.host_grid})")
  try:
    topo = topologies.get_topology_desc(platform="tpu", topology_name=f"{chip.name}:{grid}")
  except Exception as e:
    raise TargetError(f"topology {name!r}: libtpu refuses it: "
                      f"{str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__}") from None
  devices = list(topo.devices)
  per_chip = len(devices) // math.prod(int(d) for d in grid.split("x"))
  if small:
    devices = devices[:chips * per_chip]
  return Target(name, chip, chips, devices)


def target(name: str) -> Target:
  """The devices of a named topology; one TargetError line for anything else."""
  chip, _ = parse(name)
  return tpu_target(name)
