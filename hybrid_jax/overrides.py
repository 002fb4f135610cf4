"""``--config.KEY=VALUE`` overrides, the one parser of every command that takes them (train,
eval, sweep submit, sweep plan, plan, bench data): a command's ``ArgumentParser`` parses its
own options with ``parse_known_args`` and hands what is left here.

A value is read against the type of the key it replaces, as ml_collections' config flags
read it: a string key takes the text as written, an int key refuses ``abc``, a float key
takes ``3``, a tuple key takes ``8`` as ``(8,)``; ``None`` unsets an optional key. Each
mistake is one ``UserError`` line naming the key."""

import importlib.util
from pathlib import Path

from hybrid_jax.cli_args import literal
from hybrid_jax.errors import UserError, one_line

PREFIX = "--config."
USAGE = "[--config.KEY=VALUE ...]"             # what each command's usage line shows
DEFAULT_CONFIG = Path(__file__).parent / "configs" / "default.py"
_TRUE, _FALSE = ("true", "t", "yes", "1"), ("false", "f", "no", "0")


def parse(argv, only: str = "", command: str = "") -> dict[str, str]:
  """{dotted key: value text} of ``--config.KEY=VALUE`` arguments. Anything else, or a key
  outside ``only`` (a prefix such as ``eval.``), is one UserError line naming it."""
  says = f"{command}: " if command else ""
  out = {}
  for arg in argv:
    if not arg.startswith(PREFIX) or "=" not in arg:
      raise UserError(f"{says}unrecognised argument {arg.split('=', 1)[0]!r} (overrides look "
                      f"like {PREFIX}{only or 'SECTION.'}KEY=VALUE)")
    key, text = arg[len(PREFIX):].split("=", 1)
    if not key.startswith(only):
      raise UserError(f"{says}unknown flag {PREFIX}{key} (only {PREFIX}{only}* overrides apply)")
    out[key] = text
  return out


def _typed(key: str, text: str, kind: type):
  """``text`` as a value of ``kind``, the type of the key it replaces."""
  if kind is str:
    return text
  if kind is bool:
    if text.lower() in _TRUE + _FALSE:
      return text.lower() in _TRUE
    raise UserError(f"config.{key}: expects a bool (true or false), got {text!r}")
  if kind is float:
    try:
      return float(text)         # nan and inf too, as a float flag takes them
    except ValueError:
      raise UserError(f"config.{key}: expects float, got {text!r}") from None
  value = literal(text)
  if kind is tuple or kind is list:
    value = value if isinstance(value, (tuple, list)) else (value,) if text.strip() else ()
    return kind(value)
  fits = isinstance(value, kind) and not isinstance(value, bool)     # True is no int
  if kind is not type(None) and not fits:                              # None: untyped, as read
    raise UserError(f"config.{key}: expects {kind.__name__}, got {text!r}")
  return value


def set_key(config, key: str, value, error_cls=UserError, *, read=None,
            unknown: str = "unknown config key", wrong_type=None) -> None:
  """Set the dotted ``key`` (``model.window``) of ``config`` in place: the one walk of the
  CLI's overrides (``apply``) and of a sweep's grid points (``launch.grid.apply``), each
  raising its own ``error_cls`` in its own words. ``read(key, node, leaf, value)``: what is
  set instead of ``value`` (``apply``'s text read against the field); ``wrong_type(value,
  field_type)``: why a value the field refuses is wrong (default: ml_collections' words)."""
  *parents, leaf = key.split(".")
  node = config
  for part in parents:                 # a leaf or a missing key on the way: no such key
    node = node.get(part) if hasattr(node, "get_ref") else None
    if node is None:
      break
  if node is None or not hasattr(node, "get_ref") or leaf not in node:
    raise error_cls(f"config.{key}: {unknown}")
  if read is not None:
    value = read(key, node, leaf, value)
  try:
    node[leaf] = value
  except (TypeError, ValueError) as e:
    why = (wrong_type(value, node.get_ref(leaf).get_type()) if wrong_type is not None
           else one_line(e))
    raise error_cls(f"config.{key}: {value!r} has the wrong type ({why})") from None


def _read(key: str, node, leaf: str, value):
  """What an override sets: a section is refused, ``none`` unsets, other text is read
  against the field's type, a caller's own value is kept."""
  if hasattr(node[leaf], "get_ref"):
    raise UserError(f"config.{key}: is a section; override its keys (config.{key}.KEY=VALUE)")
  if isinstance(value, str) and value.lower() == "none":
    return None
  if isinstance(value, str):
    return _typed(key, value, node.get_ref(leaf).get_type())
  return value


def apply(config, overrides: dict):
  """``config`` with ``overrides`` set in place: text values (from ``parse``) read against
  each key's type, other values (a caller's own) set as given; returns ``config``."""
  for key, value in overrides.items():
    set_key(config, key, value, read=_read)
  return config


def import_file(path: Path, prefix: str, missing: Exception, failed):
  """The Python file at ``path`` run as a module named ``_{prefix}_{stem}``: the one import
  of config files and sweep files, each with its caller's errors: ``missing`` when ``path``
  is no file, ``failed(e)`` for the exception ``e`` running it raised."""
  if not path.is_file():
    raise missing
  try:
    spec = importlib.util.spec_from_file_location(f"_{prefix}_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
  except Exception as e:
    raise failed(e) from None
  return module


def load_config_file(path=None):
  """``get_config()`` of a Python config file (default: the toy CPU config); a file that
  fails to load is one UserError line."""
  path = Path(path or DEFAULT_CONFIG)

  def failed(e):
    return UserError(f"cannot load config: {path}: {one_line(e)}")
  module = import_file(path, "config", UserError(
      f"cannot load config: {path} does not exist or is not a file"), failed)
  try:
    return module.get_config()
  except Exception as e:
    raise failed(e) from None


def config_from(path, argv, command: str = ""):
  """The config of ``--config FILE`` with the overrides in ``argv`` applied."""
  return apply(load_config_file(path), parse(argv, command=command))
