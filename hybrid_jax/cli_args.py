"""The argument parser every ``hybrid-jax`` command uses: errors raise
:class:`~hybrid_jax.errors.UserError` (one line, printed once by ``hybrid_jax.cli.main``) and
``--help`` shows each option's default."""

import argparse
import ast
import sys

from hybrid_jax.errors import UserError


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
  """Each option's default, once, after its help; descriptions keep their line breaks.

  A help that says its default itself ("(default: one per core)": what None means) keeps
  its own; flags and required options have no default to show."""

  def _get_help_string(self, action):
    text = action.help or ""
    if (DEFAULT_MARK in text or not action.option_strings or action.required
        or action.nargs == 0 or action.default is argparse.SUPPRESS):
      return text
    return f"{text} (default: %(default)s)"


DEFAULT_MARK = "(default"     # "(default: ...)" or "(default on CPU: ...)": a help's own


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


def usage(prog: str, *items: str, width: int = 88) -> str:
  """A usage line written by hand, wrapped between ``items`` as argparse wraps its own: the
  ``--config.KEY=VALUE`` overrides that parse_known_args passes on are no argparse option,
  so argparse's usage cannot show them."""
  indent = " " * (len("usage: ") + len(prog) + 1)
  lines, line = [], "usage: " + prog
  for item in items:
    if len(line) + 1 + len(item) > width:
      lines.append(line)
      line = indent + item
    else:
      line += " " + item
  return "\n".join(lines + [line]).removeprefix("usage: ")


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


def literal(text: str):
  """A Python literal when ``text`` is one (``20``, ``None``, ``{'a': 1}``), else the string."""
  try:
    return ast.literal_eval(text)
  except (ValueError, SyntaxError):
    return text


def key_values(items, flag: str) -> dict:
  """Repeated ``FLAG KEY=VALUE`` options (``--slurm``, ``--ray``) as a dict of ``literal``
  values; an item without ``=`` is one UserError line."""
  out = {}
  for item in items:
    if "=" not in item:
      raise UserError(f"{flag} takes KEY=VALUE, got {item!r}")
    key, value = item.split("=", 1)
    out[key] = literal(value)
  return out


def run_tool(main, argv=None) -> int:
  """A ``python -m`` tool's ``main`` under the commands' contract: a UserError is printed as
  one line, exit 2 (``hybrid_jax.cli.main`` does this for the ``hybrid-jax`` commands)."""
  try:
    code = main(sys.argv[1:] if argv is None else list(argv))
  except UserError as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  return code if isinstance(code, int) else 0
