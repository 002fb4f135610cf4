"""The Ray backend against a real Ray cluster started here: a head node and a second node
(``ray start --address``), each of one CPU with its own custom resource standing for a host
(``host_a``, ``host_b``). No mock: runs are Ray tasks and placement groups, the supervisor a
detached actor. Covers a 4-run sweep matching the local backend, a 2-process run across the
two nodes matching one process, a killed launcher whose resubmission attaches, a killed node
whose run resumes from its last checkpoint on a replacement node, and one-line errors. The
TPU placement-group requests are checked against ``ray.util.tpu`` without a cluster.
Skipped where Ray is not installed (``pip install 'hybrid_jax[ray]'``)."""

import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np
import pytest

from hybrid_jax.launch.ray_request import Request
from hybrid_jax.launch.ray_supervisor import trainer_env
from test_sweep import _backend_log, cli, latest_checkpoint, losses, write_sweep

if os.environ.get("HYBRID_JAX_REQUIRE_RAY"):       # .ci/run: never skipped there
  import psutil
  import ray
else:
  ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'hybrid_jax[ray]')")
  psutil = pytest.importorskip("psutil")

RAY = [sys.executable, "-m", "ray.scripts.scripts"]
NODE = ["--num-cpus", "1", "--object-store-memory", "200000000", "--disable-usage-stats"]
# A dead node is noticed in ~3 s, not Ray's default ~30 s (a VM's death is what is tested).
FAST_HEALTH = dict(RAY_health_check_period_ms="1000", RAY_health_check_failure_threshold="3",
                   RAY_health_check_initial_delay_ms="1000")


def free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


class Cluster:
  """Ray nodes on this machine, each with its own temp dir, so that the processes of each
  (and only they) can be found and stopped by id: ``ray stop`` would stop every Ray on the
  machine, others' included."""

  def __init__(self):
    self.address, self.temp_dirs = None, []

  def start_node(self, resources: dict, head: bool = False):
    temp = tempfile.mkdtemp(prefix="hjray")         # short: Ray's socket paths have a limit
    self.temp_dirs.append(temp)
    args = [*RAY, "start", *NODE, "--temp-dir", temp, "--resources", json.dumps(resources),
            "--dashboard-agent-listen-port", str(free_port())]
    if head:
      port = free_port()
      args += ["--head", "--port", str(port), "--node-ip-address", "127.0.0.1",
               "--include-dashboard", "false", "--ray-client-server-port", str(free_port())]
      self.address = f"127.0.0.1:{port}"
    else:
      args += ["--address", self.address, "--node-ip-address", "127.0.0.1"]
    r = subprocess.run(args, capture_output=True, text=True, timeout=180,
                       env={**os.environ, **FAST_HEALTH})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return temp

  def processes(self, temp: str | None = None) -> list:
    """The processes of one node (by its temp dir), or of every node of this cluster."""
    dirs = [temp] if temp else self.temp_dirs
    found = []
    for p in psutil.process_iter(["cmdline"]):
      cmd = " ".join(p.info["cmdline"] or [])
      if any(d in cmd for d in dirs):
        found.append(p)
        found += p.children(recursive=True)    # workers, and the trainers they started
    return list({p.pid: p for p in found}.values())

  def kill_node(self, temp: str):
    """SIGKILL one node's processes, trainers included: a VM that vanished."""
    for p in self.processes(temp):
      try:
        p.kill()
      except psutil.NoSuchProcess:
        pass

  def stop(self):
    procs = self.processes()
    for p in procs:
      try:
        p.terminate()
      except psutil.NoSuchProcess:
        pass
    _, alive = psutil.wait_procs(procs, timeout=5)
    for p in alive:
      p.kill()


@pytest.fixture(scope="module")
def cluster():
  c = Cluster()
  try:
    c.start_node({"host_a": 1}, head=True)
    c.start_node({"host_b": 1})
    yield c
  finally:
    c.stop()


def ray_cli(cluster, *args, timeout=600):
  return cli(*args, "--backend", "ray", "--ray-address", cluster.address, timeout=timeout)


def reference_cli(*args):
  """The local backend's run of one process, on one XLA thread as a one-CPU Ray trainer runs
  (``ray_supervisor.trainer_env``): XLA:CPU's sums split over threads round differently, so
  a multi-threaded reference on a many-core host differs from it in the last bits."""
  env = {**os.environ, **trainer_env(Request())}
  return cli(*args, env=env)


def run_file(run_dir) -> dict:
  return json.loads((run_dir / "ray_run.json").read_text())


def headers(run_dir, name="train.log") -> list[str]:
  return [l for l in (run_dir / name).read_text().splitlines() if l.startswith("hybrid-jax ray:")]


def wait_for(predicate, timeout=300):
  deadline = time.time() + timeout
  while time.time() < deadline:
    if predicate():
      return True
    time.sleep(0.3)
  return False


SEEDS = """
def get_sweep():
  return Sweep(base=tiny(), grid=axis("train.seed", {seeds}))
"""


def test_four_runs_finish_on_the_cluster_with_the_local_backends_losses(cluster, tmp_path):
  sweep = write_sweep(tmp_path, SEEDS.format(seeds=[0, 1, 2, 3]), steps=12)
  reference = tmp_path / "reference"
  assert reference_cli("sweep", "submit", str(sweep), "--root", str(reference)).returncode == 0
  root = tmp_path / "root"
  r = ray_cli(cluster, "sweep", "submit", str(sweep), "--root", str(root), "--wait")
  assert r.returncode == 0, r.stdout + r.stderr
  assert r.stdout.count("submitted seed=") == 4, r.stdout
  for n in ("seed=0", "seed=1", "seed=2", "seed=3"):
    assert json.loads((root / n / "status.json").read_text())["state"] == "done"
    assert losses(root / n) == losses(reference / n), n
    assert run_file(root / n)["attempts"] == 1
  nodes = {headers(root / n)[0].split(" on node ")[1].split()[0] for n in ("seed=0", "seed=1", "seed=2", "seed=3")}
  assert len(nodes) == 2, nodes       # Ray packed them: one a node at a time (1 CPU each), both nodes
  table = cli("sweep", "status", str(root)).stdout
  assert "4 done" in table and "attempts" in table and "1/3" in table, table
  again = ray_cli(cluster, "sweep", "submit", str(sweep), "--root", str(root), "--wait")
  assert again.returncode == 0 and again.stdout.count("skipped") == 4, again.stdout


def test_a_two_process_run_spans_both_nodes_with_one_process_losses(cluster, tmp_path):
  sweep = write_sweep(tmp_path, SEEDS.format(seeds=[0]), steps=12)
  reference = tmp_path / "reference"
  assert reference_cli("sweep", "submit", str(sweep), "--root", str(reference)).returncode == 0
  root = tmp_path / "root"
  r = ray_cli(cluster, "sweep", "submit", str(sweep), "--root", str(root), "--ray", "processes=2",
              "--wait")
  assert r.returncode == 0, r.stdout + r.stderr
  run = root / "seed=0"
  assert json.loads((run / "status.json").read_text())["state"] == "done"
  nodes = [headers(run)[-1].split(" on node ")[1], headers(run, "train.1.log")[-1].split(" on node ")[1]]
  assert nodes[0] != nodes[1], nodes                      # strict spread: one process per host
  assert len(set(run_file(run)["nodes"])) == 2
  ref, got = losses(reference / "seed=0"), losses(run)
  assert [s for s, _ in got] == [s for s, _ in ref]
  np.testing.assert_allclose([l for _, l in got], [l for _, l in ref], rtol=2e-4)


def test_a_killed_launcher_leaves_the_runs_training_and_a_resubmission_attaches(cluster, tmp_path):
  steps = 160
  sweep = write_sweep(tmp_path, SEEDS.format(seeds=[0, 1]), steps=steps)
  root = tmp_path / "root"
  launcher = subprocess.Popen([sys.executable, "-m", "hybrid_jax.cli", "sweep", "submit", str(sweep),
                               "--root", str(root), "--backend", "ray", "--ray-address",
                               cluster.address, "--wait"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  assert wait_for(lambda: min(latest_checkpoint(root / n) for n in ("seed=0", "seed=1")) >= 4)
  os.kill(launcher.pid, signal.SIGKILL)
  launcher.wait()
  states = [json.loads((root / n / "status.json").read_text())["state"] for n in ("seed=0", "seed=1")]
  assert states.count("done") < 2, "killed too late to test anything"
  r = ray_cli(cluster, "sweep", "submit", str(sweep), "--root", str(root), "--wait")
  assert r.returncode == 0, r.stdout + r.stderr
  assert "already training" in r.stdout and "submitted" not in r.stdout, r.stdout
  for n in ("seed=0", "seed=1"):
    run = root / n
    assert json.loads((run / "status.json").read_text())["state"] == "done"
    assert run_file(run)["attempts"] == 1 and len(headers(run)) == 1   # one trainer, ever
    log = (run / "train.log").read_text()
    assert "resuming" not in log, log[-2000:]
    assert [s for s, _ in losses(run)] == list(range(2, steps + 1, 2))  # each step logged once


def trainer(run_dir):
  """The trainer process of a run (``python -m hybrid_jax.launch.worker RUN_DIR``)."""
  for p in psutil.process_iter(["cmdline"]):
    if p.info["cmdline"] and p.info["cmdline"][-2:] == ["hybrid_jax.launch.worker", str(run_dir)]:
      return p
  return None


def resumed_from(run_dir) -> list[int]:
  log = (run_dir / "train.log").read_text()
  return [int(part.split("from step ")[1].split("/")[0]) for part in log.split("resuming")[1:]]


def test_a_preempted_trainer_and_a_killed_node_cost_only_the_steps_since_a_checkpoint(cluster, tmp_path):
  """The run asks for a resource only a third node has (a preemptible VM). Its trainer is
  preempted (SIGTERM: it checkpoints) and retried; then that node is killed mid-run, a
  replacement joins, and the run resumes there from its last checkpoint."""
  steps = 320
  sweep = write_sweep(tmp_path, SEEDS.format(seeds=[0]), steps=steps)
  reference = tmp_path / "reference"
  assert reference_cli("sweep", "submit", str(sweep), "--root", str(reference),
             f"--config.checkpoint.every={steps}").returncode == 0
  spot = cluster.start_node({"spot": 1})
  root = tmp_path / "root"
  run = root / "seed=0"
  launcher = subprocess.Popen([sys.executable, "-m", "hybrid_jax.cli", "sweep", "submit", str(sweep),
                               "--root", str(root), "--backend", "ray", "--ray-address",
                               cluster.address, "--ray", "resources={'spot': 1}", "--wait"],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
  try:
    assert wait_for(lambda: latest_checkpoint(run) >= 8 and trainer(run))
    trainer(run).terminate()                                 # preempted: checkpoints, exits 143
    assert wait_for(lambda: run_file(run)["attempts"] == 2, timeout=300), run_file(run)
    assert wait_for(lambda: len(resumed_from(run)) == 1 and latest_checkpoint(run) > resumed_from(run)[0])
    cluster.kill_node(spot)
    saved = latest_checkpoint(run)
    assert saved < steps, "killed too late to test anything"
    assert wait_for(lambda: run_file(run)["attempts"] == 3, timeout=300), run_file(run)
    cluster.start_node({"spot": 1})                          # the replacement VM
    out, _ = launcher.communicate(timeout=600)
  finally:
    launcher.kill()
  assert launcher.returncode == 0, out
  assert "(attempt 2/3; the last preempted)" in out, out
  assert "(attempt 3/3; the last node or worker lost)" in out, out
  assert json.loads((run / "status.json").read_text())["state"] == "done"
  assert losses(run) == losses(reference / "seed=0")
  assert run_file(run)["attempts"] == 3
  assert resumed_from(run)[-1] >= saved, (resumed_from(run), saved)   # nothing before it lost
  assert "3/3" in cli("sweep", "status", str(root)).stdout


def test_a_bad_address_and_a_missing_ray_are_one_line(tmp_path):
  sweep = write_sweep(tmp_path, SEEDS.format(seeds=[0]))
  root = tmp_path / "root"
  r = cli("sweep", "submit", str(sweep), "--root", str(root), "--backend", "ray",
          "--ray-address", f"127.0.0.1:{free_port()}")
  assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
  assert "cannot reach a Ray cluster" in r.stderr and "ray start --head" in r.stderr
  no_ray = subprocess.run(
      [sys.executable, "-c", "import sys; sys.modules['ray'] = None; from hybrid_jax.cli import main; "
       f"sys.exit(main(['sweep', 'submit', {str(sweep)!r}, '--root', {str(root)!r}, '--backend', 'ray']))"],
      capture_output=True, text=True)
  assert no_ray.returncode == 2, no_ray.stderr
  err = [l for l in no_ray.stderr.splitlines() if l.strip() and not _backend_log(l)]
  assert len(err) == 1 and "pip install" in err[0] and "ray" in err[0], no_ray.stderr
  gs = cli("sweep", "submit", str(sweep), "--root", "gs://bucket/runs", "--backend", "ray")
  assert gs.returncode == 2 and len(gs.stderr.strip().splitlines()) == 1, gs.stderr
  assert "shared POSIX filesystem" in gs.stderr and "--config.checkpoint.root=gs://" in gs.stderr
  assert not root.exists()
  run = root / "seed=0"                         # a Ray sweep whose cluster has gone away
  run.mkdir(parents=True)
  (run / "launch.json").write_text("{}")
  (run / "ray_run.json").write_text(json.dumps(dict(attempts=2, max_attempts=3, phase="retrying")))
  (root / ".ray").mkdir()
  (root / ".ray" / "launcher.json").write_text(json.dumps(dict(address=f"127.0.0.1:{free_port()}")))
  table = cli("sweep", "status", str(root))
  assert table.returncode == 0 and "2/3" in table.stdout, table.stdout + table.stderr
  assert table.stdout.strip().splitlines()[-1].startswith("ray: cannot reach a Ray cluster")


def test_tpu_placement_requests_are_what_ray_tpu_schedules(tmp_path):
  """v5p 2x2x1 (one host), v6e 4x4 (four 4-chip hosts: Ray's and Cloud TPU's v6e hosts of a
  multi-host slice hold 4 chips) and a 2-slice request from a plan, against ray.util.tpu."""
  from ray.util import tpu as ray_tpu
  from hybrid_jax.launch import ray_request
  one = ray_request.Request(tpu="v5p:2x2x1").placement()
  assert one.strategy is None and one.bundles == [{"CPU": 1.0, "TPU": 4}]
  assert one.pod_type == "v5p-8" and one.head_resource is None
  assert ray_tpu.get_tpu_worker_resources("2x2x1", "v5p") == (1, one.bundles[0])
  big = ray_request.Request(tpu="v6e:4x4", cpus=8).placement()
  assert big.processes == 4 == ray_tpu.get_num_chips_from_topology("4x4") // ray_tpu.get_chips_per_host("4x4", "v6e")
  assert big.bundles[0] == {"CPU": 8.0, "TPU": 4} and big.head_resource == "TPU-v6e-16-head"
  assert ray_tpu.get_tpu_worker_resources("4x4", "v6e", {"CPU": 8.0}) == (4, big.bundles[0])
  plan = tmp_path / "grid.v5p_2x2x2.plan.jsonl"
  plan.write_text(json.dumps(dict(run="seed=0", topology="v5p:2x2x2", chips=8, devices=8, fits=True,
                                  change="train.microbatches=2", hbm_argument_bytes=2 ** 30)) + "\n")
  small = tmp_path / "grid.v5p_2x2x1.plan.jsonl"
  small.write_text(json.dumps(dict(run="seed=0", topology="v5p:2x2x1", chips=4, devices=4,
                                   fits=False, status="does not fit")) + "\n")
  said = []
  requests = ray_request.requests(["seed=0"], ray_request.parse_options(["slices=2"]),
                                  [ray_request.read_plan(small), ray_request.read_plan(plan)],
                                  log=said.append)
  two = requests["seed=0"].placement()     # the first plan that fits: v5p 2x2x2
  assert said == ["plan: seed=0 fits v5p:2x2x2 only with train.microbatches=2, which this "
                  "submission does not apply (set it in the sweep file)"]
  assert (two.slices, two.hosts_per_slice, two.processes) == (2, 2, 4)
  assert ray_tpu.get_tpu_worker_resources("2x2x2", "v5p", num_slices=2)[0] == two.processes
  assert two.bundles[0]["TPU"] == 4 and two.bundles[0]["memory"] == 4 * 2 ** 30   # 4 devices' state
  assert two.head_resource == "TPU-v5p-16-head"
  with pytest.raises(Exception, match="not a v6e topology Ray can place"):
    ray_request.Request(tpu="v6e:3x3").placement()
