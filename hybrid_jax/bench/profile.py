"""Where a compiled step's time goes: per-op device time from ``jax.profiler``, grouped by
the named scopes the model sets (embed, attention_full, attention_swa, mlp, norm, head,
loss, optimizer).

XLA:CPU records one trace event per executed HLO instruction (fusions included); the
instruction's ``op_name`` metadata carries the ``jax.named_scope`` path it was traced
under, forward and backward alike, so summing event durations by scope gives the
breakdown. Ops run on several threads at once, so the shares are of summed op time, not
of wall time. One blind spot: XLA:CPU runs a matmul whose contracted axis leads the left
operand as an asynchronous Eigen task, whose event covers the launch, not the work. The
model's weight gradients, attention's dK and dV and the recurrent scans' matmuls were such
(d256: ~70 ms of ``dot`` events a step for ~26 GFLOP); they now all take the fast form
(``pallas_kernels.cpu_matmul``, ``hybrid_jax.model.linear``), so the train step has none.
"""

import collections
import glob
import re
import tempfile

import jax

# The scope names set in model/ and train/step.py (the outermost one names an op).
GROUPS = ("optimizer", "loss", "head", "embed", "attention_full", "attention_swa",
          "attention_headwise", "mlp", "norm")


def instruction_groups(hlo_text: str) -> dict[str, str]:
  """HLO instruction name -> group, from the compiled module's op_name metadata."""
  groups = {}
  for m in re.finditer(r"%([\w.\-]+) = .*?metadata=\{op_name=\"([^\"]*)\"", hlo_text):
    name, op_name = m.group(1), m.group(2)
    groups[name] = next((w for w in re.findall(r"\w+", op_name) if w in GROUPS), "other")
  return groups


def op_time_by_group(fn, *args, reps: int = 5) -> dict[str, float]:
  """Seconds per call of each group's ops, summed over threads, of the jitted ``fn``
  (already compiled for ``args``; called ``reps`` times under the profiler)."""
  groups = instruction_groups(fn.lower(*args).compile().as_text())
  out = None
  with tempfile.TemporaryDirectory() as d:
    with jax.profiler.trace(d):
      for _ in range(reps):
        out = fn(*args)
        jax.block_until_ready(out)
    data = jax.profiler.ProfileData.from_file(glob.glob(f"{d}/**/*.xplane.pb", recursive=True)[0])
  ns = collections.Counter()
  for plane in data.planes:
    for line in plane.lines:
      for event in line.events:
        name = event.name.removeprefix("end: ")
        if name in groups:
          ns[groups[name]] += event.duration_ns
  return {g: ns[g] * 1e-9 / reps for g in (*GROUPS, "other") if ns[g]}
