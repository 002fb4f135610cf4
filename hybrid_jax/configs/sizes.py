"""Named model shapes (``model.size``): config data only. Parameter counting and the
d_ff matching live beside the model (``hybrid_jax.model.params``).

Paper scales S1-S4 use the shapes that give the published non-embedding counts exactly
with this model's layout (GQA with 2 kv heads, head_dim 64, d_ff = 2.5 d_model);
S5 is the nearest such shape to the published ~477M.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Size:
  n_layers: int
  d_model: int
  n_heads: int
  n_kv_heads: int
  d_ff: int


SIZES = {
    # CPU toys, ~0.03M .. ~8M non-embedding parameters (full-attention baseline). The two
    # smallest exist for the toy scaling study (experiments/scaling), where three sizes must
    # fit a CPU budget.
    "toy-3xs": Size(2, 32, 2, 1, 96),
    "toy-2xs": Size(2, 64, 4, 2, 192),
    "toy-xs": Size(4, 64, 4, 2, 192),
    "toy-s": Size(4, 128, 4, 2, 320),
    "toy-m": Size(8, 192, 6, 2, 480),
    "toy-l": Size(8, 320, 10, 2, 800),
    # The paper's S1-S5 (non-embedding 14,999,424 / 31,470,080 / 64,901,760 / 104,427,264 / ~477M).
    "S1": Size(10, 384, 6, 2, 960),
    "S2": Size(12, 512, 8, 2, 1280),
    "S3": Size(16, 640, 10, 2, 1600),
    "S4": Size(18, 768, 12, 2, 1920),
    "S5": Size(30, 1280, 20, 2, 3200),
}

PAPER_NON_EMBEDDING = {"S1": 14_999_424, "S2": 31_470_080, "S3": 64_901_760,
                       "S4": 104_427_264, "S5": 477_000_000}
