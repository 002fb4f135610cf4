"""Reads a compiled XLA:CPU program for matmuls in the slow form: a dot whose left operand
contracts an axis other than its last (size-1 axes aside) runs as an Eigen contraction
instead of XLA:CPU's YNNPACK dot kernel (``pallas_kernels.cpu_matmul``)."""

import re

_SHAPE = re.compile(r"%([\w.\-]+) = \w+\[([\d,]*)\]")
_PARAM = re.compile(r"([\w.\-]+): \w+\[([\d,]*)\]")
_DOT = re.compile(r"%([\w.\-]+) = \w+\[[\d,]*\]\S* dot\(%([\w.\-]+), %[\w.\-]+\).*?"
                  r"lhs_contracting_dims=\{([\d,]+)\}")


def dots(hlo: str) -> list[tuple[str, list[int], tuple[int, ...]]]:
  """(name, left operand's shape, its contracted axes) of every dot in ``hlo``."""
  shapes = {name: [int(x) for x in dims.split(",")] if dims else []
            for name, dims in _SHAPE.findall(hlo) + _PARAM.findall(hlo)}
  return [(name, shapes[lhs], tuple(int(a) for a in axes.split(",")))
          for name, lhs, axes in _DOT.findall(hlo)]


def slow_form_dots(hlo: str) -> list[tuple[str, list[int], tuple[int, ...]]]:
  """The dots with an uncontracted axis of size > 1 after a contracted one."""
  return [d for d in dots(hlo)
          if any(n > 1 and i not in d[2] for i, n in enumerate(d[1]) if i > min(d[2]))]
