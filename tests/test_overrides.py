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
