"""The Ray backend, launcher side: connect, hand the runs to the sweep root's supervisor
(``ray_supervisor``: a detached actor on the cluster), and optionally wait for them.

The launcher holds nothing the runs need: killed, it leaves them training, and the next
``sweep submit`` attaches to the same supervisor (found by name) rather than starting any
run twice. ``<root>/.ray/launcher.json`` keeps the cluster's address and the actor's name,
so that ``sweep status`` can read Ray's view beside the run directories.
"""

import hashlib
import json
import logging
import os
import socket
import time
from pathlib import Path

from hybrid_jax.errors import UserError
from hybrid_jax.run import RunDir, atomic_write_text

LAUNCHER_FILE = Path(".ray") / "launcher.json"
CONNECT_TIMEOUT_S = 5.0


def import_ray():
  try:
    import ray
  except ImportError:
    raise UserError("--backend ray needs Ray: pip install 'hybrid_jax[ray]' "
                    "(or pip install 'ray[default]>=2.60')") from None
  return ray


def supervisor_name(root: Path) -> str:
  """One supervisor per sweep root, named by the root's absolute path (the same on every
  node of a shared filesystem)."""
  return "hj-sweep:" + hashlib.sha1(str(Path(root).absolute()).encode()).hexdigest()[:16]


def _reachable(address: str) -> str | None:
  """Why ``host:port`` cannot be reached, or None (a quick TCP check: ray.init retries a
  dead address for a minute before it gives up)."""
  host, _, port = address.rpartition(":")
  try:
    with socket.create_connection((host or "127.0.0.1", int(port)), timeout=CONNECT_TIMEOUT_S):
      return None
  except ValueError:
    return "not HOST:PORT"
  except OSError as e:
    return e.strerror or type(e).__name__


def connect(address: str = "auto"):
  """Join the cluster as a driver; one UserError line when it cannot."""
  ray = import_ray()
  if ray.is_initialized():
    return ray
  if address not in ("auto", "local") and "://" not in address:
    why = _reachable(address)
    if why:
      raise UserError(f"cannot reach a Ray cluster at {address} ({why}); start one with "
                      "`ray start --head` or pass --ray-address HOST:PORT of its head")
  try:
    ray.init(address=address, namespace="hybrid_jax", logging_level=logging.WARNING,
             log_to_driver=False, configure_logging=True)
  except (ConnectionError, RuntimeError, ValueError) as e:
    first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    raise UserError(f"cannot connect to a Ray cluster at {address}: {first}"
                    + ("; start one with `ray start --head` or pass --ray-address HOST:PORT"
                       if address == "auto" else "")) from None
  return ray


# Ray's resource of the head node: the supervisor lives there, away from the preemptible
# TPU and spot VMs whose loss it is there to survive (the cluster ends with its head anyway).
HEAD_RESOURCE = "node:__internal_head__"


def supervisor(ray, root: Path):
  """The root's supervisor, created (detached, restartable, on the head) when there is none."""
  from hybrid_jax.launch.ray_supervisor import NAMESPACE, Supervisor
  name = supervisor_name(root)
  return Supervisor.options(name=name, namespace=NAMESPACE, lifetime="detached",
                            get_if_exists=True, resources={HEAD_RESOURCE: 0.001}).remote(
      str(Path(root).absolute()), name)


def _view(ray, root: Path, tries: int = 30) -> dict:
  """The supervisor's view, through a restart of it (its node died: Ray restarts it)."""
  from hybrid_jax.launch.ray_supervisor import NAMESPACE
  for _ in range(tries):
    try:
      actor = ray.get_actor(supervisor_name(root), namespace=NAMESPACE)
      return ray.get(actor.view.remote(), timeout=60)
    except (ValueError, ray.exceptions.RayActorError, ray.exceptions.GetTimeoutError):
      time.sleep(2.0)
  raise UserError(f"the Ray supervisor of {root} is gone; submit again to start a new one")


def run_ray(run_dirs: list[Path], requests: dict, *, root: Path, address: str = "auto",
            max_attempts: int = 3, wait: bool = False, log=print, poll_s: float = 2.0) -> dict:
  """Hand every run to the supervisor (attaching to those it already has); with ``wait``,
  follow them until each ended. Returns {run name: exit code}: 0 done, 1 failed or gave
  up (after ``wait``), -1 still in the cluster's hands (without it)."""
  ray = connect(address)
  root = Path(root)
  entries = [dict(run_dir=str(Path(d).absolute()), request=requests[Path(d).name].to_json(),
                  max_attempts=max_attempts) for d in run_dirs]
  for tries in range(5):      # a supervisor exiting as we call it (idle): make a new one
    actor = supervisor(ray, root)
    try:
      added = ray.get(actor.add.remote(entries))
      break
    except ray.exceptions.RayActorError:
      time.sleep(1.0)
  else:
    raise UserError(f"the Ray supervisor of {root} keeps dying; see the cluster's logs "
                    "(ray logs) for why")
  atomic_write_text(root / LAUNCHER_FILE, json.dumps(dict(
      address=ray.get_runtime_context().gcs_address, actor=supervisor_name(root))) + "\n")
  for name, how in added.items():
    log(f"{'attached ' if how == 'attached' else 'submitted'} {name}"
        + (": already training on the cluster" if how == "attached" else ""))
  names = set(added)
  if not wait:
    return {n: -1 for n in names}
  from hybrid_jax.launch.ray_supervisor import terminal
  seen = {}
  try:
    while True:
      view = {n: v for n, v in _view(ray, root).items() if n in names}
      for n, v in sorted(view.items()):
        if seen.get(n) != (v["phase"], v["attempts"]):
          seen[n] = (v["phase"], v["attempts"])
          log(f"{n}: {v['phase']} (attempt {v['attempts']}/{v['max_attempts']}"
              + (f"; the last {v['last']})" if v.get("last") and v["attempts"] > 1 else ")"))
      if names <= set(view) and all(terminal(v["phase"]) for v in view.values()):
        break
      time.sleep(poll_s)
  except KeyboardInterrupt:
    raise KeyboardInterrupt("launcher stopped; the runs go on on the Ray cluster "
                            "(sweep status shows them; submit again to attach)") from None
  codes = {"done": 0}
  return {n: codes.get(v["phase"], 1) for n, v in view.items()}


def ray_view(root: Path, address: str | None = None) -> tuple[dict, str | None]:
  """({run name: supervisor's view}, a note) for ``sweep status``: the note says why there
  is no view (no Ray, an unreachable cluster, no supervisor), or None."""
  root = Path(root)
  try:
    launcher = json.loads((root / LAUNCHER_FILE).read_text())
  except (OSError, ValueError):
    launcher = {}
  address = address or launcher.get("address")
  if not address:
    return {}, None
  try:
    ray = connect(address)
  except UserError as e:
    return {}, f"ray: {e}; states are from the run directories"
  from hybrid_jax.launch.ray_supervisor import NAMESPACE
  try:
    actor = ray.get_actor(launcher.get("actor") or supervisor_name(root), namespace=NAMESPACE)
    return ray.get(actor.view.remote(), timeout=30), None
  except (ValueError, ray.exceptions.RayError):
    return {}, f"ray: no supervisor of {root} on the cluster at {address} (all runs ended)"
