"""The model section's rules and filling: shape fields from ``model.size``, then every
rule (each failure one line naming the field), then d_ff matched to the full-attention
baseline. Called by ``hybrid_jax.resolve`` before any compute."""

from hybrid_jax.configs import sizes
from hybrid_jax.configs.rules import fail
from hybrid_jax.model import params, registry
from hybrid_jax.model.lm import REMAT_POLICIES
from pallas_kernels.linear_scan.api import IMPLEMENTATIONS as RECURRENT_IMPLS
from pallas_kernels.swa.api import IMPLEMENTATIONS as ATTENTION_IMPLS

POS_SCHEMES = ("rope", "nope")
DTYPES = ("float32", "bfloat16")
SHAPE_FIELDS = ("n_layers", "d_model", "n_heads", "n_kv_heads", "d_ff")


def resolve_model(m) -> None:
  """Fill and check the model section ``m`` in place (a copy the caller owns)."""
  _fill_shape(m)
  check_model(m)
  check_kernel_keys(m)
  if m.d_ff is None:   # the size's MLP ratio, then matched to the full-attention baseline
    size = sizes.SIZES.get(m.size)
    ratio = size.d_ff / size.d_model if size else params.DEFAULT_FF_RATIO
    m.d_ff = params.round_d_ff(ratio * m.d_model)
    target = params.baseline_params(m)
    if abs(params.non_embedding_params(m) - target) > params.MATCH_TOLERANCE * target:
      m.d_ff = params.match_d_ff(m, target)


def _fill_shape(m):
  if m.size != "custom":
    if m.size not in sizes.SIZES:
      fail("model.size", f"must be 'custom' or one of {', '.join(sizes.SIZES)}", m.size)
    size = sizes.SIZES[m.size]
    for f in SHAPE_FIELDS:
      if m[f] is None and f != "d_ff":
        m[f] = getattr(size, f)
  for f in SHAPE_FIELDS[:-1]:
    if m[f] is None:
      fail(f"model.{f}", "must be set when model.size is 'custom'", None)


def check_model(m):
  """The shape, pattern, positional and recurrent-mixer rules of a shape-filled section."""
  for f in SHAPE_FIELDS[:-1]:
    if not isinstance(m[f], int) or m[f] < 1:
      fail(f"model.{f}", "must be a positive integer", m[f])
  if m.d_model % m.n_heads:
    fail("model.n_heads", f"must divide model.d_model={m.d_model}", m.n_heads)
  if m.n_heads % m.n_kv_heads:
    fail("model.n_kv_heads", f"must divide model.n_heads={m.n_heads}", m.n_kv_heads)
  if m.head_dim is not None and m.head_dim < 2:
    fail("model.head_dim", "must be >= 2", m.head_dim)
  if m.head_dim is None and m.d_model // m.n_heads < 2:
    fail("model.n_heads", "leaves head_dim = d_model / n_heads < 2", m.n_heads)
  if not isinstance(m.window, int) or m.window < 1:
    fail("model.window", "must be an integer >= 1", m.window)
  known = registry.letters()
  if not m.pattern or any(ch not in known for ch in m.pattern):
    fail("model.pattern", f"letters must be among {known!r}", m.pattern)
  if m.n_layers % len(m.pattern):
    fail("model.n_layers", f"must be a multiple of the pattern length {len(m.pattern)} ({m.pattern!r})",
         m.n_layers)
  for f in ("pos_full", "pos_swa", "pos_headwise"):
    if m[f] not in POS_SCHEMES:
      fail(f"model.{f}", f"must be one of {POS_SCHEMES}", m[f])
  if "H" in m.pattern:
    if not 0.0 < m.local_head_fraction < 1.0:
      fail("model.local_head_fraction", "must be strictly between 0 and 1", m.local_head_fraction)
    nl, group = round(m.local_head_fraction * m.n_heads), m.n_heads // m.n_kv_heads
    if nl == 0 or nl == m.n_heads or nl % group:
      fail("model.local_head_fraction",
           f"must give a number of windowed heads (of {m.n_heads}) that is a positive multiple "
           f"of the GQA group size {group} and not all heads", m.local_head_fraction)
  if m.rope_theta <= 0:
    fail("model.rope_theta", "must be > 0", m.rope_theta)
  if m.vocab_size < 2:
    fail("model.vocab_size", "must be >= 2", m.vocab_size)
  if m.dtype not in DTYPES:
    fail("model.dtype", f"must be one of {DTYPES}", m.dtype)
  for f in ("chunk_size", "conv_kernel", "ssm_expand", "ssm_state", "ssm_head_dim", "gdn_expand_v"):
    if not isinstance(m[f], int) or m[f] < 1:
      fail(f"model.{f}", "must be an integer >= 1", m[f])
  if "M" in m.pattern and (m.ssm_expand * m.d_model) % m.ssm_head_dim:
    fail("model.ssm_head_dim", f"must divide d_inner = ssm_expand * d_model = "
         f"{m.ssm_expand * m.d_model}", m.ssm_head_dim)
  if m.d_ff is not None and m.d_ff < 1:
    fail("model.d_ff", "must be a positive integer", m.d_ff)
  if m.remat not in REMAT_POLICIES:
    fail("model.remat", f"must be one of {tuple(REMAT_POLICIES)}", m.remat)


def check_kernel_keys(m):
  """The kernel implementations the model asks ``pallas_kernels`` for."""
  if m.attention_impl not in ATTENTION_IMPLS:
    fail("model.attention_impl", f"must be one of {ATTENTION_IMPLS}", m.attention_impl)
  blocks = m.swa_block_sizes
  if blocks is not None and (not isinstance(blocks, (tuple, list)) or len(blocks) != 3 or not all(
      isinstance(c, int) and not isinstance(c, bool) and c >= 8 and c % 8 == 0 for c in blocks)):
    fail("model.swa_block_sizes", "must be None or (forward, dQ, dK/dV) block sizes, each a "
         "multiple of 8 (powers of 2 >= 16 on GPU)", blocks)
  if m.recurrent_impl not in RECURRENT_IMPLS:
    fail("model.recurrent_impl", f"must be one of {RECURRENT_IMPLS}", m.recurrent_impl)
