"""What ``plan`` compiles for: a named topology's devices and per-device peaks.

The chip table, the topology names, the deviceless devices and the install hints are
``pallas_kernels.targets``' (one table for kernels and trainer; TPU through libtpu, H100/H200
through the CUDA plugin); this adds only the per-device figures the roofline and the fit
check divide by. A ``TargetError`` stays a ``ValueError`` of one line; the CLI makes it a
``UserError``.
"""

import dataclasses
import math

from pallas_kernels import targets as _targets
from pallas_kernels.targets import CHIPS, Chip, TargetError  # noqa: F401  (plan's names)


@dataclasses.dataclass
class Target:
  """The devices to compile for and what each holds and does (a chip's figures are shared
  by its devices when a topology shows more than one device per chip)."""
  name: str
  chip: Chip
  chips: int
  devices: list

  @property
  def platform(self) -> str:
    return self.chip.platform

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


def target(name: str) -> Target:
  """The devices of a named topology (``v5p:2x2x1``, ``v5e:1x1``, ``h100:8``); one
  TargetError line for an unknown name or a missing compiler (with its pip command)."""
  chip_name, shape = _targets.parse(name)
  return Target(name, CHIPS[chip_name], math.prod(shape), _targets.devices(name))


# Chips (GPUs) of one host: v4 and v5p hosts hold 4 chips, v5e and v6e hosts 8 (a 2x2 or 1x1
# slice is part of one host: still one host), a GPU host 8. Cloud TPU's slice tables: v5p
# 2x2x2 is 2 hosts, v5e 4x4 is 2.
HOST_CHIPS = {"v4": 4, "v5p": 4, "v5e": 8, "v6e": 8, "h100": 8, "h200": 8}
MULTI_HOST_CHIPS = {"v5e": 4, "v6e": 4}   # their slices past one 8-chip host use 4-chip hosts


def host_chips(t: Target) -> int:
  """Chips on one host of the topology (a v5e/v6e slice of up to 8 chips is one host; a
  larger one is made of 4-chip hosts, as Cloud TPU and Ray's TPU support lay them out)."""
  per = HOST_CHIPS[t.chip.name]
  return MULTI_HOST_CHIPS.get(t.chip.name, per) if t.chips > per else per


def hosts(t: Target) -> int:
  """Hosts of the topology: each makes the input of only its own share of the batch, so
  the input time per step divides by them."""
  return math.ceil(t.chips / host_chips(t))
