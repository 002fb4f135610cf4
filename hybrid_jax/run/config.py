"""A run's config.json: read it back into the current schema, and say how two differ."""

import json
from pathlib import Path

import ml_collections

from hybrid_jax.configs.base import base_config
from hybrid_jax.run.errors import RunDirError

CONFIG_FILE = "config.json"

# Sections that say how a run is executed, not what it computes: a run may resume with
# other values (e.g. on another mesh: checkpoints restore onto any mesh).
EXECUTION_SECTIONS = ("mesh",)
# how batches are made and checkpoints written, never which
EXECUTION_KEYS = ("data.workers", "data.prefetch", "checkpoint.async_save")


def config_diff(old: dict, new: dict, prefix="", defaults: dict | None = None) -> list[str]:
  """``section.key: old -> new`` for every value that differs. A key the run's config.json
  lacks (the schema gained it after the run started) counts as its schema default, so an
  older run resumes unless the new config asks for something else there."""
  defaults = json.loads(base_config().to_json()) if defaults is None else defaults
  out = []
  for key in sorted(set(old) | set(new)):
    if (not prefix and key in EXECUTION_SECTIONS) or f"{prefix}{key}" in EXECUTION_KEYS:
      continue
    a, b = old.get(key, defaults.get(key, "<absent>")), new.get(key, "<absent>")
    if isinstance(a, dict) and isinstance(b, dict):
      sub = defaults.get(key)
      out += config_diff(a, b, f"{prefix}{key}.", sub if isinstance(sub, dict) else {})
    elif a != b:
      out.append(f"{prefix}{key}: {a!r} -> {b!r}")
  return out



def merge_config(schema, values: dict, prefix=""):
  """``values`` (config.json) written into ``schema`` (lists back to tuples); keys the schema
  no longer knows are skipped, keys it gained keep their defaults."""
  for key, value in values.items():
    if key == "derived" or key not in schema:
      continue
    if isinstance(schema[key], ml_collections.ConfigDict):
      merge_config(schema[key], value, f"{prefix}{key}.")
    else:
      schema[key] = tuple(value) if isinstance(value, list) else value


def load_config(workdir) -> ml_collections.ConfigDict:
  """The run's config (unresolved, with the current schema's defaults for missing keys); a
  one-line ``RunDirError`` when there is no run or its config.json cannot be read."""
  path = Path(workdir)
  if not path.is_dir():
    raise RunDirError(f"run directory {path} does not exist")
  try:
    values = json.loads((path / CONFIG_FILE).read_text())
  except FileNotFoundError:
    raise RunDirError(f"{path} is not a run directory (no {CONFIG_FILE})") from None
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise RunDirError(f"{path / CONFIG_FILE} is not valid JSON ({e})") from None
  return config_from_values(values)


def config_from_values(values: dict) -> ml_collections.ConfigDict:
  """An unresolved config from config.json's values: the current schema's types, tuples and
  defaults (``merge_config`` into ``base_config()``)."""
  cfg = base_config()
  merge_config(cfg, values)
  return cfg


def read_config_json(workdir) -> dict | None:
  """config.json as a plain dict, or None when it is missing or unreadable (tools that list
  many runs skip such a run instead of stopping)."""
  try:
    return json.loads((Path(workdir) / CONFIG_FILE).read_text())
  except (OSError, ValueError):
    return None
