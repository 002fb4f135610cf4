"""Plans of runs, what ``plan`` and ``sweep plan`` print and write: each run's train step
compiled for a topology (no accelerator needed), one JSON line per run, written as soon as
it exists so that ``--resume`` keeps what an interrupted grid planned."""

import hashlib
import json
import os
from pathlib import Path

import ml_collections

from hybrid_jax.run.config import EXECUTION_KEYS


def quiet_libtpu():
  """libtpu looks for TPU hardware and metadata at import; a planning host has neither.
  Imports marked "lazy: after quiet_libtpu()" load JAX, so they wait for this."""
  os.environ.setdefault("TPU_SKIP_MDS_QUERY", "1")
  os.environ.setdefault("TPU_ACCELERATOR_TYPE", "v5p-8")
  os.environ.setdefault("TPU_WORKER_HOSTNAMES", "localhost")
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  os.environ.setdefault("JAX_PLATFORMS", "cpu")


# What the compile ignores: how batches are made and saves written (the run layer's
# EXECUTION_KEYS), where checkpoints go (``checkpoint.root``, which a resume may not change,
# so not an execution key), the data's files (hashed as their defaults, so plans made before a corpus
# was named still match) and their fingerprint; a key the schema gained after the committed
# plans counts only when set away from its default. (A tokenizer's vocabulary is
# model.vocab_size, which is hashed.)
HASHED_AS = {"data.corpus": "", "data.tokenizer": "byte"}
UNHASHED = EXECUTION_KEYS + ("checkpoint.root", "derived.data_fingerprint")
UNHASHED_AT_DEFAULT = {"model.swa_block_sizes": None}


def config_hash(cfg, target) -> str | None:
  """What a record was planned from: the resolved config (less what the compile ignores) and
  the target."""
  if cfg is None:
    return None
  d = cfg.to_dict()
  sections = lambda paths: (((d.get(p.split(".")[0]) or {}), p.split(".")[1]) for p in paths)
  for section, key in sections(UNHASHED):
    section.pop(key, None)
  for (section, key), value in zip(sections(HASHED_AS), HASHED_AS.values()):
    if key in section:
      section[key] = value
  for (section, key), default in zip(sections(UNHASHED_AT_DEFAULT), UNHASHED_AT_DEFAULT.values()):
    if key in section and section[key] == default:
      section.pop(key)
  text = ml_collections.ConfigDict(d).to_json(sort_keys=True)
  return hashlib.sha256((text + target.name).encode()).hexdigest()[:16]


def earlier_records(out_path: Path) -> dict[str, dict]:
  """Records of an earlier plan by run name: from ``OUT.partial`` (interrupted) else ``OUT``.
  Unreadable lines are skipped: they are planned again."""
  for path in (Path(str(out_path) + ".partial"), out_path):
    if path.exists():
      found = {}
      for line in path.read_text().splitlines():
        try:
          rec = json.loads(line)
          found[rec["run"]] = rec
        except (ValueError, KeyError, TypeError):
          continue
      return found
  return {}


def run_plans(prog, named_runs, target, out_path, search=True, log=print, resume=False) -> list[dict]:
  """Plan every (name, resolved config or None, error) in order; each record is written as
  soon as it exists (to ``out_path.partial``, renamed when the grid is done), so an
  interrupted grid loses at most the run being compiled when ``--resume`` is given again."""
  from hybrid_jax.plan.fit import Compiler, plan_run  # lazy: after quiet_libtpu()
  from hybrid_jax.plan.report import host_model, record, table, totals, with_input  # lazy: after quiet_libtpu()
  compiler = Compiler(target, log=lambda m: log(f"{prog}: {m}"))
  records = []
  partial = Path(str(out_path) + ".partial")
  partial.parent.mkdir(parents=True, exist_ok=True)
  earlier = earlier_records(out_path) if resume else {}
  kept = 0
  with open(partial, "w") as f:
    for i, (name, cfg, error) in enumerate(named_runs):
      key = config_hash(cfg, target)
      old = earlier.get(name)
      was_kept = cfg is not None and old is not None and old.get("config_hash") == key
      if was_kept:
        rec, kept = old, kept + 1
      elif cfg is None:
        rec = dict(record(name, None, None, target, error), config_hash=key)
      else:
        rec = dict(record(name, cfg, plan_run(cfg, compiler, search), target), config_hash=key)
      rec = with_input(rec, cfg, target)      # kept records too: the host model is not compiled
      records.append(rec)
      f.write(json.dumps(rec) + "\n")
      f.flush()
      os.fsync(f.fileno())
      line = (rec["status"] + (f": {rec['reason']}" if rec.get("reason") else "")
              + (", input-bound" if rec.get("input_bound") else "")
              + (f" (input not measured: {rec['input_error']})" if rec.get("input_error") else "")
              + (" (kept from before)" if was_kept else ""))
      log(f"{prog}: [{i + 1}/{len(named_runs)}] {name}: {line}")
  os.replace(partial, out_path)
  tot = totals(records)
  print(table(records))
  print(f"{prog}: {tot['runs']} runs on {target.name}: {tot['fit']} fit "
        f"({tot['fit_with_change']} with a change), {tot['do_not_fit']} do not fit, "
        f"{tot['do_not_compile']} do not compile, {tot['invalid']} invalid; "
        f"{tot['chip_hours']:.4g} chip-hours for the {tot['fit']} that fit "
        f"({tot['tokens']:.3g} tokens, {tot['model_flops']:.3g} model FLOPs); "
        f"{tot['input_bound']} input-bound ({host_model(records)}); "
        f"{compiler.compiles} compiles" + (f", {kept} records kept from before" if resume else "")
        + f"; wrote {out_path}")
  return records
