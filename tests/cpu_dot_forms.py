"""Reads a compiled XLA:CPU program for matmuls in the slow form: a dot whose left operand
contracts an axis other than its last (size-1 axes aside) runs as an Eigen contraction
instead of XLA:CPU's YNNPACK dot kernel (``pallas_kernels.cpu_matmul``)."""

import re

_SHAPE = re.compile(r"%([\w.\-]+) = \w+\[([\d,]*)\]")
_PARAM = re.compile(r"([\w.\-]+): \w+\[([\d,]*)\]")
_DOT = re.compile(r"%([\w.\-]+) = \w+\[[\d,]*\]\S* dot\(%([\w.\-]+), %[\w.\-]+\).*?"
                  r"lhs_contracting_dims=\{(\d+)\}")


def dots(hlo: str) -> list[tuple[str, list[int], int]]:
  """(name, left operand's shape, its contracted axis) of every dot in ``hlo``."""
  shapes = {name: [int(x) for x in dims.split(",")] if dims else []
            for name, dims in _SHAPE.findall(hlo) + _PARAM.findall(hlo)}
  return [(name, shapes[lhs], int(axis)) for name, lhs, axis in _DOT.findall(hlo)]


def slow_form_dots(hlo: str) -> list[tuple[str, list[int], int]]:
  return [d for d in dots(hlo) if any(n > 1 for n in d[1][d[2] + 1:])]
