"""Config validation, sizes, parameter counts and matching, CLI override parsing."""

import jax
import numpy as np
import pytest
from flax import nnx

from conftest import tiny_config
from hybrid_jax.commands.train import parse_train_flags
from hybrid_jax.configs import ConfigError, sizes
from hybrid_jax.configs.base import base_config
from hybrid_jax.configs.default import get_config
from hybrid_jax.model import build_model, registry
from hybrid_jax.resolve import resolve


@pytest.mark.parametrize("field,value,match", [
    ("model.n_heads", 3, "model.n_heads: must divide model.d_model"),
    ("model.n_kv_heads", 3, "model.n_kv_heads: must divide model.n_heads"),
    ("model.window", 0, "model.window: must be an integer >= 1"),
    ("model.pattern", "SX", "model.pattern: letters must be among"),
    ("model.pattern", "SSF", "model.n_layers: must be a multiple of the pattern length 3"),
    ("model.pos_full", "alibi", "model.pos_full: must be one of"),
    ("model.size", "huge", "model.size: must be 'custom' or one of"),
    ("data.seq_len", 1, "data.seq_len: must be an integer >= 2"),
    ("train.steps", 0, "train.steps: must be >= 1"),
    ("train.schedule", "linear", "train.schedule: must be one of"),
    ("model.dtype", "float16", "model.dtype: must be one of"),
])
def test_validation_errors_name_the_field(field, value, match):
  c = tiny_config()
  section, key = field.split(".")
  c[section][key] = value
  with pytest.raises(ConfigError, match=match) as e:
    resolve(c)
  assert "\n" not in str(e.value)


def test_budget_smaller_than_one_batch_is_rejected():
  c = tiny_config()
  c.train.steps = None
  c.train.tokens = 100
  with pytest.raises(ConfigError, match="train.tokens: token budget 100 is less than one batch"):
    resolve(c)


def test_unknown_keys_are_rejected():
  c = tiny_config()
  c.unlock()
  c.model.widow = 3
  with pytest.raises(ConfigError, match="config.model.widow: unknown key"):
    resolve(c)


def test_headwise_fraction_must_fit_gqa_groups():
  with pytest.raises(ConfigError, match="model.local_head_fraction"):
    resolve(tiny_config(pattern="H", local_head_fraction=0.25))  # 1 head of a 2-head group


def test_token_budget_units():
  c = tiny_config()
  c.train.steps = None
  c.train.tokens_per_param = 10.0
  r = resolve(c)
  per_step = c.train.batch_size * c.data.seq_len
  assert r.derived.steps == int(10 * r.derived.non_embedding_params) // per_step
  c.train.tokens_per_param, c.train.tokens = None, 50 * per_step + 7
  assert resolve(c).derived.steps == 50
  c.train.steps = 3                       # steps overrides the token budget
  assert resolve(c).derived.steps == 3


def test_paper_sizes_match_published_counts():
  c = base_config()
  c.model.pattern = "F"
  c.train.steps = 1
  for name in ("S1", "S2", "S3", "S4"):
    c.model.size = name
    assert resolve(c).derived.non_embedding_params == sizes.PAPER_NON_EMBEDDING[name]
  c.model.size = "S5"
  assert abs(resolve(c).derived.non_embedding_params / 477e6 - 1) < 0.005


def test_toy_sizes_span_the_cpu_range():
  c = base_config()
  c.train.steps = 1
  counts = []
  for name in ("toy-xs", "toy-s", "toy-m", "toy-l"):
    c.model.size = name
    counts.append(resolve(c).derived.non_embedding_params)
  assert 0.15e6 < counts[0] < 0.3e6 and 5e6 < counts[-1] < 12e6 and counts == sorted(counts)


@pytest.mark.parametrize("pattern", ["F", "SF", "SSSF", "HF", "FS", "MF", "GF", "LF", "GGGF"])
def test_analytic_param_count_equals_the_built_model(pattern):
  r = resolve(tiny_config(pattern=pattern, n_layers=4, tie_embeddings=False))
  model = build_model(r.model, 0)
  params = nnx.state(model, nnx.Param)
  leaves = jax.tree_util.tree_leaves_with_path(params)
  non_embed = sum(int(np.prod(x.shape)) for p, x in leaves
                  if not any(getattr(k, "key", None) in ("embed", "head") for k in p))
  assert non_embed == r.derived.non_embedding_params


@pytest.mark.parametrize("size", ["toy-xs", "toy-s", "toy-m", "toy-l", "S1", "S2", "S3", "S4", "S5"])
def test_recurrent_hybrids_are_parameter_matched_at_every_named_size(size):
  c = base_config()
  c.train.steps = 1
  c.model.size, c.model.pattern = size, "F"
  base = resolve(c).derived.non_embedding_params
  for pattern in ("MF", "GF", "LF"):
    c.model.pattern = pattern
    assert abs(resolve(c).derived.non_embedding_params / base - 1) <= 0.05, pattern


def test_a_mixer_of_another_size_is_matched_within_five_percent():
  """A new mixer is one registered builder; the size ladder re-fits d_ff to match."""
  from hybrid_jax.model.attention import Attention, attention_param_count
  letter = "Q"
  count = lambda m: 3 * attention_param_count(m)   # a deliberately heavier mixer
  if letter not in registry.letters():
    registry.register(letter, "heavy test mixer", "recurrent", count, lambda m, t: 0)(
        lambda m, rngs: Attention(m, local_heads=0, pos="rope", rngs=rngs))
  c = base_config()
  c.train.steps = 1
  for size in ("toy-s", "toy-m", "S1", "S3"):
    c.model.size = size
    c.model.pattern = "F"
    base = resolve(c).derived.non_embedding_params
    c.model.pattern = "QF"
    r = resolve(c)
    assert abs(r.derived.non_embedding_params / base - 1) <= 0.05
    assert r.model.d_ff < sizes.SIZES[size].d_ff
    c.model.pattern = "SF"
    assert resolve(c).derived.non_embedding_params == base   # attention hybrids: equal counts


def test_cli_flags_load_file_and_apply_overrides(tmp_path):
  cfg, workdir = parse_train_flags(["--workdir", str(tmp_path), "--config.model.window=64",
                                    "--config.model.pattern=SSSF", "--config.train.tokens=None",
                                    "--config.train.steps=7"])
  assert (cfg.model.window, cfg.model.pattern, cfg.train.tokens, cfg.train.steps) == (64, "SSSF", None, 7)
  assert workdir == str(tmp_path)
  default = get_config()
  assert cfg.model.size == default.model.size


def test_cli_config_file_argument(tmp_path):
  f = tmp_path / "my_config.py"
  f.write_text("from hybrid_jax.configs.default import get_config as base\n"
               "def get_config():\n  c = base()\n  c.model.window = 5\n  return c\n")
  cfg, _ = parse_train_flags(["--config", str(f), "--workdir", str(tmp_path / "run"),
                              "--config.model.n_layers=8"])
  assert (cfg.model.window, cfg.model.n_layers) == (5, 8)


# --- configs as a leaf, resolved once, a frozen model config at the model boundary -------

import dataclasses  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import hybrid_jax.resolve  # noqa: E402
from hybrid_jax.configs import is_resolved  # noqa: E402
from hybrid_jax.core.eval_settings import EvalSettings  # noqa: E402
from hybrid_jax.model.config import ModelConfig  # noqa: E402
from hybrid_jax.model.flops import model_flops_per_token  # noqa: E402
from hybrid_jax.resolve import ensure_resolved  # noqa: E402
from source_imports import imported_modules  # noqa: E402

PACKAGE = Path(__file__).parents[1] / "hybrid_jax"


def test_configs_is_a_leaf_of_the_package():
  for path in sorted((PACKAGE / "configs").glob("*.py")):
    outside = {n for n in imported_modules(path)
               if n.split(".")[0] in ("hybrid_jax", "pallas_kernels")
               and not n.startswith("hybrid_jax.configs") and n != "hybrid_jax.errors"}
    assert not outside, f"{path.name} imports {sorted(outside)}"
  code = ("import sys; import hybrid_jax.configs, hybrid_jax.configs.sizes, hybrid_jax.configs.default, "
          "hybrid_jax.configs.paper; print(sorted(m for m in sys.modules "
          "if m.startswith(('hybrid_jax.', 'pallas_kernels')) and not m.startswith('hybrid_jax.configs') "
          "and m not in ('hybrid_jax.errors', 'hybrid_jax.host_memory', 'hybrid_jax.blas_threads')))")   # the package's own leaves
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
  assert out.stdout.strip() == "[]"


def test_the_model_counts_its_parameters_without_the_configs_package():
  for name in ("lm.py", "params.py", "registry.py"):
    assert not {n for n in imported_modules(PACKAGE / "model" / name)
                if n.startswith("hybrid_jax.configs")}, name
  # the registry finds the mixers on disk: the modules that register can import it
  assert not {n for n in imported_modules(PACKAGE / "model" / "registry.py") if n.startswith("hybrid_jax")}


def test_model_config_is_frozen_and_has_every_schema_key():
  r = resolve(tiny_config())
  m = ModelConfig.from_config(r.model)
  assert {f.name for f in dataclasses.fields(ModelConfig)} == set(base_config().model.keys())
  assert dataclasses.asdict(m) == r.model.to_dict()
  with pytest.raises(dataclasses.FrozenInstanceError):
    m.d_model = 8
  assert ModelConfig.from_config(m) is m


def test_mixers_are_built_from_the_frozen_model_config(monkeypatch):
  seen = []
  spec = registry.get("S")
  monkeypatch.setitem(registry._MIXERS, "S", dataclasses.replace(
      spec, build=lambda m, rngs: seen.append(m) or spec.build(m, rngs)))
  build_model(resolve(tiny_config()).model, 0)
  assert seen and all(isinstance(m, ModelConfig) for m in seen)


def test_an_unresolved_config_is_refused_where_a_resolved_one_is_needed():
  c = tiny_config()
  with pytest.raises(ConfigError, match=r"config\.model\.\w+: unset; the model needs a resolved"):
    build_model(c.model, 0)
  for needs_resolved in (model_flops_per_token, EvalSettings.from_config):
    with pytest.raises(ValueError, match="needs a resolved config"):
      needs_resolved(c)
  r = resolve(c)
  assert model_flops_per_token(r) > 0 and EvalSettings.from_config(r).lengths


def test_ensure_resolved_resolves_only_a_requested_config():
  c = tiny_config()
  assert not is_resolved(c)
  r = ensure_resolved(c)
  assert is_resolved(r) and ensure_resolved(r) is r


def test_a_train_command_resolves_its_config_once(monkeypatch, tmp_path):
  from hybrid_jax.commands import train as training
  from hybrid_jax.train import loop
  calls, trained = [], []
  real = hybrid_jax.resolve.resolve
  counting = lambda cfg: calls.append(1) or real(cfg)
  monkeypatch.setattr(hybrid_jax.resolve, "resolve", counting)

  def fake_train(cfg, workdir, **kwargs):   # the loop's own entry: resolves only if needed
    trained.append(ensure_resolved(cfg))
    return dict(state="done", step=1, total_steps=1)

  monkeypatch.setattr(loop, "train", fake_train)
  assert training.main([f"--workdir={tmp_path}", "--config.train.steps=1"]) == 0
  assert len(calls) == 1 and is_resolved(trained[0])


def test_training_time_eval_checks_do_not_resolve_a_resolved_config_again(monkeypatch):
  from hybrid_jax.eval.evaluate import check_settings
  r = resolve(tiny_config())
  calls = []
  real = hybrid_jax.resolve.resolve
  monkeypatch.setattr(hybrid_jax.resolve, "resolve", lambda cfg: calls.append(1) or real(cfg))
  assert check_settings(r).lengths == tuple(r.eval.lengths)
  assert calls == []
  check_settings(tiny_config())
  assert calls == [1]


# --- the typed sections packages read at their boundaries -------------------------------

from hybrid_jax.core.eval_config import EvalConfig  # noqa: E402
from hybrid_jax.data.config import DataConfig  # noqa: E402
from hybrid_jax.train.config import CheckpointConfig, MeshConfig, TrainConfig  # noqa: E402

SECTIONS = [("data", DataConfig), ("train", TrainConfig), ("eval", EvalConfig),
            ("checkpoint", CheckpointConfig), ("mesh", MeshConfig)]


@pytest.mark.parametrize("section,cls", SECTIONS, ids=[s for s, _ in SECTIONS])
def test_each_section_view_is_frozen_and_has_every_schema_key(section, cls):
  r = resolve(tiny_config())
  view = cls.from_config(r[section])
  assert {f.name for f in dataclasses.fields(cls)} == set(base_config()[section].keys())
  assert dataclasses.asdict(view) == r[section].to_dict()
  with pytest.raises(dataclasses.FrozenInstanceError):
    setattr(view, dataclasses.fields(cls)[0].name, None)
  assert cls.from_config(view) is view
  assert cls.from_config(r[section].to_dict()) == view          # a plain dict serves too
  hash(view)                                                    # sequences are tuples


def test_a_section_view_refuses_an_unfilled_field_in_one_line():
  c = tiny_config()                                   # data.seed is filled by resolve
  with pytest.raises(ConfigError, match=r"^config\.data\.seed: unset; DataConfig needs a resolved"):
    DataConfig.from_config(c.data)
  as_json = dict(resolve(c).eval.to_dict(), lengths=[512, 1024])   # a list: a tuple in the view
  assert EvalConfig.from_config(as_json).lengths == (512, 1024)
  assert EvalConfig.from_config(c.eval).every is None           # None is a setting here
