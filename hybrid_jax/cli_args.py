"""The argument parser every ``hybrid-jax`` command uses: errors raise
:class:`~hybrid_jax.errors.UserError` (one line, printed once by ``hybrid_jax.cli.main``) and
``--help`` shows each option's default."""

import argparse

from hybrid_jax.errors import UserError


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
  """Defaults in the help of every option; descriptions keep their line breaks."""


class ArgumentParser(argparse.ArgumentParser):
  """argparse with one-line errors as UserError, and the defaults shown by ``--help``."""

  def __init__(self, *args, **kwargs):
    kwargs.setdefault("formatter_class", HelpFormatter)
    super().__init__(*args, **kwargs)

  def error(self, message):
    command = self.prog.removeprefix("hybrid-jax").strip()   # "data build", or "" at the top
    raise UserError(f"{command}: {message}" if command else message)

  def add_subparsers(self, **kwargs):
    kwargs.setdefault("parser_class", ArgumentParser)
    self.register("action", "parsers", _SubParsers)
    return super().add_subparsers(**kwargs)


def sentence(text: str) -> str:
  """``text`` as a whole sentence: capitalised, ending in a full stop."""
  text = text.strip()
  return text[:1].upper() + text[1:] + ("" if text.endswith((".", "?", "!")) else ".")


class _SubParsers(argparse._SubParsersAction):
  """Subcommands whose ``--help`` opens with their one-line help, as a sentence."""

  def add_parser(self, name, **kwargs):
    if "help" in kwargs and "description" not in kwargs:
      kwargs["description"] = sentence(kwargs["help"])
    return super().add_parser(name, **kwargs)


# ``--config.a.b=None`` unsets an optional key, which absl's typed parsers cannot express.
def unset_overrides(argv):
  """(argv without ``--config.x=None`` flags, the dotted keys they unset)."""
  is_unset = lambda a: a.startswith("--config.") and a.split("=", 1)[-1] in ("None", "none")
  return ([a for a in argv if not is_unset(a)],
          [a.split("=", 1)[0][len("--config."):] for a in argv if is_unset(a)])


def unset(config, paths, allowed_prefix=""):
  for path in paths:
    *parents, leaf = path.split(".")
    node = config
    for p in parents:
      node = node[p]
    if leaf not in node or not path.startswith(allowed_prefix):
      raise KeyError(f"unknown config key {path}")
    node[leaf] = None
