"""The one ``--config.KEY=VALUE`` parser: values read against the type of the key they
replace, ``None`` unsets, every mistake one UserError line naming the key; and the train
command's own options (``--quiet``, ``--local_processes``) parsed by its parser."""

import pytest

from hybrid_jax import overrides
from hybrid_jax.commands import train as train_command
from hybrid_jax.configs.default import get_config
from hybrid_jax.errors import UserError


def _apply(*args):
  return overrides.apply(get_config(), overrides.parse(list(args)))


def test_values_are_read_against_each_keys_type():
  c = _apply("--config.model.window=64", "--config.train.lr=1", "--config.train.steps=None",
             "--config.eval.lengths=8", "--config.eval.depths=0.1,0.2", "--config.model.pattern=64",
             "--config.eval.tasks=", "--config.checkpoint.async_save=false",
             "--config.train.tokens_per_param=nan", "--config.eval.reference=/runs/a")
  assert (c.model.window, c.train.lr, c.train.steps) == (64, 1.0, None)
  assert type(c.train.lr) is float and c.model.pattern == "64"       # a string key: as written
  assert (c.eval.lengths, c.eval.depths, c.eval.tasks) == ((8,), (0.1, 0.2), "")
  assert c.checkpoint.async_save is False and c.train.tokens_per_param != c.train.tokens_per_param
  assert c.eval.reference == "/runs/a"


@pytest.mark.parametrize("arg, says", [
    ("--config.model.window=abc", "config.model.window: expects int, got 'abc'"),
    ("--config.model.window=True", "config.model.window: expects int"),
    ("--config.train.lr=fast", "config.train.lr: expects float"),
    ("--config.model.windw=3", "config.model.windw: unknown config key"),
    ("--config.nope.x=1", "config.nope.x: unknown config key"),
    ("--config.model=3", "config.model: is a section"),
    ("--config.model.window", "unrecognised argument '--config.model.window'"),
    ("--verbose", "unrecognised argument '--verbose'"),
])
def test_each_mistake_is_one_line_naming_the_key(arg, says):
  with pytest.raises(UserError) as e:
    _apply(arg)
  assert says in str(e.value) and "\n" not in str(e.value)


def test_a_prefix_limits_the_keys_a_command_takes():
  assert overrides.parse(["--config.eval.examples=2"], only="eval.") == {"eval.examples": "2"}
  with pytest.raises(UserError, match=r"^eval: unknown flag --config.model.window"):
    overrides.parse(["--config.model.window=4"], only="eval.", command="eval")


def test_train_options_are_parsed_not_scanned(tmp_path):
  args, config = train_command.parse(["--workdir", str(tmp_path), "--quiet",
                                      "--local_processes=2", "--config.train.steps=3"])
  assert (args.quiet, args.local_processes, config.train.steps) == (True, 2, 3)
  assert train_command._child_argv(args) == ["--workdir", str(tmp_path), "--quiet",
                                             "--config.train.steps=3"]
  args, _ = train_command.parse(["--workdir", str(tmp_path)])
  assert (args.quiet, args.local_processes) == (False, 1)
  with pytest.raises(UserError, match="it takes no --coordinator"):
    train_command.parse(["--workdir", str(tmp_path), "--local_processes", "2",
                         "--coordinator", "127.0.0.1:1"])
  with pytest.raises(UserError, match="--workdir"):
    train_command.parse(["--quiet"])


# --- one walk and one file import for the CLI's overrides and a sweep's grid points --------

def test_a_sweeps_none_string_stays_a_string_while_config_none_unsets():
  from hybrid_jax.launch import grid
  swept = grid.apply(get_config(), {"model.pattern": "None", "train.steps": None})
  assert (swept.model.pattern, swept.train.steps) == ("None", None)      # set as given
  c = _apply("--config.model.pattern=None", "--config.train.steps=none")
  assert (c.model.pattern, c.train.steps) == (None, None)                # text: None unsets
  c = get_config()
  overrides.set_key(c, "model.pattern", "None")                          # the shared walk
  assert c.model.pattern == "None"


def test_unknown_keys_keep_each_callers_error_type_and_message():
  from hybrid_jax.launch import grid
  for key in ["model.windw", "nope.x", "model.window.x", "model.pattern.F"]:   # through a leaf
    with pytest.raises(UserError) as cli_error:
      _apply(f"--config.{key}=3")
    assert type(cli_error.value) is UserError
    assert str(cli_error.value) == f"config.{key}: unknown config key"
    with pytest.raises(grid.SweepError) as sweep_error:    # not a TypeError through a leaf
      grid.apply(get_config(), {key: 3})
    assert str(sweep_error.value) == f"config.{key}: unknown key"


def test_wrong_types_keep_each_callers_message():
  from hybrid_jax.launch import grid
  with pytest.raises(grid.SweepError, match=r"^config.model.window: '64' has the wrong type "
                     r"\(str; the field takes int\)$"):
    grid.apply(get_config(), {"model.window": "64"})
  with pytest.raises(UserError, match=r"^config.model.window: 1.5 has the wrong type \(Could "
                     "not override field window"):
    overrides.apply(get_config(), {"model.window": 1.5})
  with pytest.raises(UserError, match=r"^config.model: is a section"):
    overrides.set_key(get_config(), "model", 3, read=overrides._read)


def test_config_and_sweep_files_are_imported_by_one_helper_with_their_own_errors(tmp_path):
  from hybrid_jax.launch import grid
  broken = tmp_path / "broken.py"
  broken.write_text("x = (\n")
  missing = tmp_path / "missing.py"
  with pytest.raises(UserError, match=rf"^cannot load config: {missing} does not exist"):
    overrides.load_config_file(missing)
  with pytest.raises(grid.SweepError, match=rf"^sweep file {missing} does not exist"):
    grid.load_sweep(missing)
  with pytest.raises(UserError, match=rf"^cannot load config: {broken}: \( was never closed"):
    overrides.load_config_file(broken)
  with pytest.raises(grid.SweepError, match=rf"^{broken}: syntax error at line 1: "):
    grid.load_sweep(broken)
  (tmp_path / "ok.py").write_text("X = 1\n")
  module = overrides.import_file(tmp_path / "ok.py", "sweep", KeyError("missing"), KeyError)
  assert (module.__name__, module.X) == ("_sweep_ok", 1)
  with pytest.raises(KeyError, match="missing"):
    overrides.import_file(missing, "sweep", KeyError("missing"), KeyError)


# --- bench subcommands: --config FILE and --config.KEY=VALUE, read by this parser ----------

def _bench(argv, capsys):
  """(exit code, stderr lines) of ``hybrid-jax bench ARGV``."""
  from hybrid_jax.commands import bench as bench_cli
  code = bench_cli.main(argv)
  return code, capsys.readouterr().err.strip().splitlines()


@pytest.mark.parametrize("name", ["train", "eval", "mesh"])
def test_bench_subcommands_refuse_an_unknown_key_in_one_line(name, capsys, monkeypatch):
  from hybrid_jax.bench import mesh, train
  monkeypatch.setattr(mesh, "run", lambda *a: pytest.fail("a probe ran"))
  monkeypatch.setattr(train, "project_row", lambda *a, **k: pytest.fail("a worker ran"))
  code, err = _bench([name, "--config.model.windw=3"], capsys)
  assert (code, err) == (2, [f"hybrid-jax bench {name}: error: config.model.windw: unknown "
                             "config key"])


@pytest.mark.parametrize("name", ["train", "eval", "mesh"])
def test_bench_subcommands_show_the_config_options_in_their_usage(name, capsys):
  from hybrid_jax.commands import bench as bench_cli
  with pytest.raises(SystemExit):
    bench_cli.main([name, "--help"])
  usage = " ".join(capsys.readouterr().out.split("\n\n")[0].split())
  assert f"[--config FILE] {overrides.USAGE}" in usage, usage


def test_bench_eval_evaluates_the_config_with_its_overrides_over_the_flags(tmp_path):
  from hybrid_jax.bench import eval as bench_eval
  config = tmp_path / "wide.py"
  config.write_text("from hybrid_jax.configs.default import get_config as toy\n"
                    "def get_config():\n  c = toy()\n  c.model.window = 8\n  return c\n")
  args, c = bench_eval.parse(["--config", str(config), "--examples", "3", "--lengths", "64",
                              "--config.eval.examples=5", "--config.model.pattern=SSF"])
  assert (c.model.window, c.model.pattern, c.eval.examples, c.eval.lengths) == (8, "SSF", 5, (64,))


def test_bench_train_builds_every_worker_and_the_peer_on_the_overridden_config(monkeypatch):
  from hybrid_jax.bench import train, train_workers
  started = []
  monkeypatch.setattr(train, "project_row", lambda shape, steps, threads, breakdown_=False,
                      extra=(): started.append(list(extra)) or dict(side="project"))

  class Side:
    def __init__(self, what, cmd, env=None, cpu=None, processes=1):
      started.append(cmd)
      self.ready = dict(threads=1, processes=1)

    def block(self, steps):
      return 0.1

    def close(self):
      pass
  monkeypatch.setattr(train, "Measured", Side)
  monkeypatch.setattr(train, "torch_available", lambda: True)
  override = "--config.model.window=16"
  assert train.main(["--shapes", "toy", "--rounds", "1", "--warmup-rounds", "0", "--peer",
                     "--no-breakdown", "--compile-shapes", "", override]) == 0
  one_shot, project, peer = started
  assert one_shot == [override]
  assert project == train.project_command("toy", "--serve", override)
  assert peer[peer.index("--window") + 1] == "16"
  assert train.shape_config("d256", None, [override]).model.window == 16   # over the shape's 128
  seen = []                          # a worker builds the config of the flags it is given
  monkeypatch.setattr(train_workers.distributed, "initialize", lambda: 1)
  monkeypatch.setattr(train_workers, "project_step_seconds",
                      lambda cfg, steps, **k: seen.append(cfg) or 0.1)
  train_workers.worker(["--shape", "toy", "--steps", "1", override])
  assert seen[0].model.window == 16


def test_bench_mesh_probes_the_overridden_config_on_each_mesh(monkeypatch):
  from hybrid_jax.bench import mesh
  calls = []
  monkeypatch.setattr(mesh, "run", lambda *a: calls.append(a) or dict(
      step_s=1.0, param_bytes_per_device=8))
  mesh.main(["--steps", "1", "--config.model.window=16"])
  assert [(c[1], c[2], c[4], c[5]) for c in calls] == [
      (1, 1, None, ["--config.model.window=16"]), (8, 1, None, ["--config.model.window=16"]),
      (2, 4, None, ["--config.model.window=16"]), (1, 8, None, ["--config.model.window=16"])]
  cfg = mesh.probe_config(None, ["--config.model.window=16", "--config.mesh.fsdp=2"], 1, 1)
  assert (cfg.model.window, cfg.mesh.data, cfg.mesh.fsdp) == (16, 1, 1)   # the mesh: the bench's


def test_the_pilot_runs_the_paper_config_with_its_overrides_over_the_flags(capsys):
  from hybrid_jax.bench import pilot
  from hybrid_jax.cli_args import run_tool
  argv = ["--corpus", "corpus", "--out", "pilot.json", "--seq-len", "128"]
  args, rest = pilot._parser().parse_known_args(argv + ["--config.model.window=16",
                                                        "--config.data.seq_len=256"])
  c = pilot.requested(args, rest)
  assert (c.model.window, c.data.seq_len, c.data.corpus, c.model.size) == (16, 256, "corpus", "S1")
  assert f"[--config FILE] {overrides.USAGE}" in " ".join(pilot._parser().format_usage().split())
  assert run_tool(pilot.main, argv + ["--config.model.windw=3"]) == 2
  assert capsys.readouterr().err.strip().splitlines() == [
      "error: config.model.windw: unknown config key"]
