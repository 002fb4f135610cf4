"""``--help`` of every command and subcommand, found by walking the dispatch tables and each
parser's subparsers (not the help text itself): every subcommand is listed by its parent,
every option has a help text and shows its default once (flags and required options none,
and never a bare ``None``), and every command taking ``--config.KEY=VALUE`` overrides says so
in its usage."""

import argparse
import re

import pytest

from hybrid_jax import cli
from hybrid_jax.commands import bench as bench_cli
from hybrid_jax.commands import data as data_cli
from hybrid_jax.commands import plot as plot_cli

# Modes a flag picks rather than a subcommand, each with a --help of its own.
MODES = [("bench", "data", "--config", "CONFIG_FILE")]
# Commands that take --config.KEY=VALUE overrides (hybrid_jax.overrides).
TAKE_OVERRIDES = {("train",), ("eval",), ("plan",), ("sweep", "plan"), ("sweep", "submit"),
                  ("bench", "data"), ("bench", "loop"), ("bench", "train"), ("bench", "eval"),
                  ("bench", "mesh"), MODES[0]}
OVERRIDES_USAGE = re.compile(r"\[--config\.(\w+\.)*KEY=VALUE \.\.\.\]")
# Defaults that tell a reader nothing: the help must say what an absent value means.
BLANK_DEFAULT = re.compile(r"\(default: (None|\[\]|)\)")


def _dispatched_children(words: tuple) -> set[str]:
  """Subcommands that the code dispatches on outside argparse subparsers."""
  tables = {(): cli.COMMANDS, ("bench",): bench_cli.SUBCOMMANDS, ("plot",): plot_cli.KINDS}
  found = set(tables.get(words, ()))
  found |= {sub for (command, sub) in cli.SUBCOMMANDS if (command,) == words}
  found |= {key[-1] for key in data_cli.NESTED if ("data", *key[:-1]) == words}
  return found


def _help(words, stdout):
  """(printed help, the argparse parser that printed it)."""
  printed = []
  format_help = argparse.ArgumentParser.format_help
  with pytest.MonkeyPatch.context() as monkeypatch:
    monkeypatch.setattr(argparse.ArgumentParser, "format_help",
                        lambda self: printed.append(self) or format_help(self))
    try:
      code = cli.main([*words, "--help"])
    except SystemExit as e:             # argparse exits after help; our dispatchers return
      code = e.code
  assert code in (0, None), (words, code)
  return stdout.read(), (printed[-1] if printed else None)


class _Stdout:
  """What the walk's commands print (capsys is per test; the walk runs once per module)."""

  def __init__(self):
    self.parts = []

  def write(self, text):
    self.parts.append(text)

  def flush(self):
    pass

  def read(self) -> str:
    out, self.parts = "".join(self.parts), []
    return out


@pytest.fixture(scope="module")
def helps():
  """{words: (help text, parser)} of every command and subcommand, depth first."""
  stdout = _Stdout()
  found, todo = {}, [(), *MODES]
  with pytest.MonkeyPatch.context() as monkeypatch:
    monkeypatch.setattr("sys.stdout", stdout)
    while todo:
      words = todo.pop()
      out, parser = _help(words, stdout)
      found[words] = out, parser
      children = set(_dispatched_children(words))
      for action in parser._actions if parser is not None else ():
        if isinstance(action, argparse._SubParsersAction):
          children |= set(action.choices)
      todo += [(*words, child) for child in sorted(children)]
  return found


def _listed(child: str, text: str) -> bool:
  """``child`` named as a choice ({a,child,b}) or at the start of an indented line."""
  return bool(re.search(rf"[{{,]{re.escape(child)}[,}}]|^\s+{re.escape(child)}\s", text, re.M))


def test_the_walk_reaches_every_command_and_the_subcommands_dispatched_outside_argparse(helps):
  for words in [("train",), ("sweep", "plan"), ("data", "tokenizer", "train"), ("bench", "kernels"),
                ("plot", "scaling"), ("analyze", "gradient"), ("export", "hf"), *MODES]:
    assert words in helps, words
  assert len(helps) > 30


def test_every_subcommand_is_listed_by_its_parent(helps):
  missing = [" ".join(words) for words in helps
             if words and words not in MODES and not _listed(words[-1], helps[words[:-1]][0])]
  assert not missing, f"not listed in their parent's --help: {missing}"


def _option_problems(words, text, parser) -> list[str]:
  flat = " ".join(text.split())
  usage = " ".join(text.split("\n\n")[0].split())
  problems = []
  formatter = parser._get_formatter()
  for action in parser._actions:
    if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
      continue
    name = "/".join(action.option_strings) or action.dest
    shown = formatter._expand_help(action) if action.help else ""
    if not shown.strip():
      problems.append(f"{name}: no help text")
      continue
    assert " ".join(shown.split()) in flat, (words, name)   # what --help prints
    defaults = len(re.findall(r"\(default\b", shown))
    no_default = not action.option_strings or action.required or action.nargs == 0
    if no_default and defaults:
      problems.append(f"{name}: a default shown for a flag, positional or required option")
    elif not no_default and defaults != 1:
      problems.append(f"{name}: {defaults} defaults shown")
    elif BLANK_DEFAULT.search(shown):
      problems.append(f"{name}: says {BLANK_DEFAULT.search(shown)[0]} (say what absent means)")
    if action.option_strings and not any(s in usage for s in action.option_strings):
      problems.append(f"{name}: not in the usage")
  return [f"{' '.join(words)} {p}" for p in problems]


def test_every_option_has_a_help_text_and_shows_one_default(helps):
  problems = [p for words, (text, parser) in helps.items() if parser is not None
              for p in _option_problems(words, text, parser)]
  assert not problems, "\n".join(problems)


def test_train_help_lists_every_config_key_with_its_default(helps):
  text, parser = helps[("train",)]
  assert parser is not None                 # the project parser, as every command's
  keys = text.split("\nconfig keys (")[1].splitlines()[1:]
  assert "  model.window = 32" in keys and len(keys) > 40, keys


def test_every_command_taking_config_overrides_shows_them_in_its_usage(helps):
  for words in TAKE_OVERRIDES:
    usage = " ".join(helps[words][0].split("\n\n")[0].split())
    assert OVERRIDES_USAGE.search(usage), (words, usage)


def test_eval_help_gives_the_readmes_time_per_checkpoint(helps):
  from docs_text import docs_text
  readme = " ".join(docs_text().split())
  first, further = re.search(r"take (\d+) s for the first checkpoint .*? and (\d+) s for each "
                             r"further one", readme).groups()
  text = " ".join(helps[("eval",)][0].split())
  assert f"({first} s for the first, {further} s for each further one" in text, text
