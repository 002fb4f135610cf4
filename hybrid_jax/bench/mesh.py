"""``hybrid-jax bench mesh``: step time and bytes per device of the toy model on 1 device and
on 8 forced host devices under several meshes (each in its own process: the device count
is fixed when JAX starts). On one CPU the forced devices share the same cores, so step
times show the cost of the collectives, not a speed-up; the bytes per device show FSDP
splitting parameters and optimizer state ~1/fsdp. The model is the toy default's, or that of
``--config FILE [--config.KEY=VALUE ...]`` (its mesh keys are the bench's to set)."""

import json
import os
import subprocess
import sys

from hybrid_jax import overrides
from hybrid_jax.bench import add_config, run_config
from hybrid_jax.cli_args import ArgumentParser, usage

PROG = "hybrid-jax bench mesh"

PROBE = """
import json, time
import jax, numpy as np
from hybrid_jax.bench.mesh import probe_config
from hybrid_jax.bench.train import project_step_seconds
from hybrid_jax.train import sharding
from hybrid_jax.train.state import init_state
cfg = probe_config({config!r}, {argv!r}, {data}, {fsdp})
mesh = sharding.make_mesh(cfg.mesh)
_, _, state, _, _ = init_state(cfg, mesh)
dev0 = jax.devices()[0]
def bytes_on_dev0(tree):
  return int(sum(s.data.nbytes for x in jax.tree.leaves(tree) for s in x.addressable_shards
                 if s.device == dev0))
params_b, state_b = bytes_on_dev0(state["params"]), bytes_on_dev0(state)
del state
step_s = project_step_seconds(cfg, {steps}, mesh=mesh)
print(json.dumps(dict(devices=jax.device_count(), mesh=[{data}, {fsdp}], step_s=step_s,
                      param_bytes_per_device=params_b, state_bytes_per_device=state_b)))
"""


def host_devices_env(devices: int) -> dict:
  """This environment for a child JAX process on ``devices`` forced CPU devices, keeping any
  XLA_FLAGS already set."""
  flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}"
  return dict(os.environ, JAX_PLATFORMS="cpu", XLA_FLAGS=flags.strip())


def probe_config(path, argv, data: int, fsdp: int):
  """The resolved config a probe times: ``run_config``'s, on a ``data`` x ``fsdp`` mesh (set
  last: the meshes are what the bench compares)."""
  from hybrid_jax.resolve import resolve   # lazy: JAX, in the probe's own process
  c = run_config(path, argv)
  c.mesh.data, c.mesh.fsdp = data, fsdp
  return resolve(c)


def run(devices, data, fsdp, steps, config=None, argv=()):
  env = host_devices_env(devices)
  probe = PROBE.format(data=data, fsdp=fsdp, steps=steps, config=config, argv=list(argv))
  r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env)
  if r.returncode:
    raise SystemExit(f"hybrid-jax bench mesh: error: {r.stderr.strip().splitlines()[-1]}")
  return json.loads(r.stdout.strip().splitlines()[-1])


def main(argv=None):
  p = ArgumentParser(prog=PROG, description=__doc__.split("\n\n")[0],
                     usage=usage(PROG, "[--config FILE]", overrides.USAGE, "[--steps N]"))
  add_config(p)
  p.add_argument("--steps", type=int, default=5, metavar="N", help="timed steps per mesh")
  a, rest = p.parse_known_args(argv)
  run_config(a.config, rest)            # a mistake: one line here, not in a probe
  rows = [run(1, 1, 1, a.steps, a.config, rest)] + [run(8, d, f, a.steps, a.config, rest)
                                                     for d, f in ((8, 1), (2, 4), (1, 8))]
  base = rows[0]
  for row in rows:
    row["step_time_vs_1_device"] = row["step_s"] / base["step_s"]
    row["param_bytes_vs_1_device"] = row["param_bytes_per_device"] / base["param_bytes_per_device"]
    print(json.dumps(row), flush=True)
  return rows
