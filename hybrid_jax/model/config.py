"""The model's typed, frozen view of a resolved ``model`` section (as nanodo's DoConfig):
what ``LM`` hands its blocks and mixers, so a mixer can neither read an unfilled ``None``
shape field nor change the config it was built from."""

import dataclasses

from hybrid_jax.configs.rules import ConfigError


OPTIONAL = ("head_dim", "swa_block_sizes")     # None is a setting here, not an unfilled shape


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  """Every key of ``base_config().model``, under the same names (see configs/base.py)."""
  size: str
  pattern: str
  window: int
  local_head_fraction: float
  pos_full: str
  pos_swa: str
  pos_headwise: str
  rope_theta: float
  d_model: int
  n_layers: int
  n_heads: int
  n_kv_heads: int
  head_dim: int | None          # None: d_model // n_heads
  d_ff: int
  vocab_size: int
  tie_embeddings: bool
  norm_eps: float
  dtype: str
  attention_impl: str
  swa_block_sizes: tuple | None  # Pallas SWA blocks per phase (forward, dQ, dK/dV); None: defaults
  recurrent_impl: str
  chunk_size: int
  conv_kernel: int
  ssm_expand: int
  ssm_state: int
  ssm_head_dim: int
  gdn_expand_v: int
  remat: str                    # what a block keeps for its backward pass (lm.REMAT_POLICIES)

  @classmethod
  def from_config(cls, m) -> "ModelConfig":
    """From a resolved ``model`` section (a ConfigDict or dict); a ModelConfig passes through."""
    if isinstance(m, cls):
      return m
    names = [f.name for f in dataclasses.fields(cls)]
    unfilled = [n for n in names if n not in OPTIONAL and m[n] is None]
    if unfilled:
      raise ConfigError(f"config.model.{unfilled[0]}: unset; the model needs a resolved config "
                        "(hybrid_jax.resolve.resolve)")
    values = {n: m[n] for n in names}
    if values["swa_block_sizes"] is not None:
      values["swa_block_sizes"] = tuple(values["swa_block_sizes"])
    return cls(**values)
