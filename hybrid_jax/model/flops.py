"""Model FLOPs per trained token: the numerator of MFU and of a sweep's compute estimate."""

import numpy as np

from hybrid_jax.configs import require_resolved
from hybrid_jax.model import registry
from hybrid_jax.model.attention import head_dim, n_local_heads


def model_flops_per_token(cfg) -> float:
  """6 x matmul parameters (incl. the LM head) + attention scores on the keys each query
  really sees (causal: (T+1)/2 on average; SWA: the band only), forward + backward."""
  require_resolved(cfg, "model_flops_per_token")
  m, t = cfg.model, cfg.data.seq_len
  n_matmul = cfg.derived.non_embedding_params + m.vocab_size * m.d_model
  pos = np.arange(t)
  full_keys, band_keys = float(np.mean(pos + 1)), float(np.mean(np.minimum(pos + 1, m.window)))
  attn = 0.0
  for letter in cfg.derived.layers:
    kind = registry.get(letter).kind
    if kind == "full":
      heads_keys = m.n_heads * full_keys
    elif kind == "swa":
      heads_keys = m.n_heads * band_keys
    elif kind == "headwise":
      nl = n_local_heads(m)
      heads_keys = nl * band_keys + (m.n_heads - nl) * full_keys
    else:
      heads_keys = 0.0
    attn += 12 * head_dim(m) * heads_keys     # (QK^T + PV) x 2 flops x 3 (fwd + bwd)
  return 6 * n_matmul + attn
