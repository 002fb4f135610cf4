"""Every choice the XLA path makes for its caller: the query block, the variant (block by
block, strips or folded), how many (example, kv head) rows a loop step takes, and whether
the backward reads the forward's kept probabilities or recomputes them."""

import math

from pallas_kernels import dispatch


def default_block_size(t: int, window: int) -> int:
  """Half the window (each query block then reads a key strip of ~1.5 w; w gives 2 w), at
  least 16 rows, at most 256, at most T. ``python -m hybrid_jax.bench.kernels --cpu-blocks`` times
  it against half and twice it on XLA:CPU: at the toy SWA (w 32) 16-row blocks are 1.12-1.14x
  8-row and 1.17-1.27x 32-row ones; at d256 (D 64, w 128) 64 rows are 1.02-1.04x 32 rows and
  1.14x 128 rows."""
  block = max(window // 2, 16)
  return max(1, min(block, 256, t))


def causal_block_size(t: int, head_dim: int = 16) -> int:
  """Query blocks of >= 64 rows (128 at head dim >= 64), at most 16 of them: skipping the
  key blocks above the diagonal saves (N - 1) / 2N of the work, and few blocks keep the
  program small. At the toy shapes (D 16, T 256) 64-row score tiles stay in cache and the
  causal saving grows (``bench --cpu-blocks``: 1.22-1.25x over 128 rows, 1.10-1.11x over 32).
  At D 64 the attention op alone is even between 64 and 128 rows (``--cpu-blocks``: 0.99-1.00x)
  and 1.11x faster than with 256; 128 rows were taken for the whole d256 train step, 1.3-3.1%
  faster at B 8 (two runs) and 1.4% at B 4 in an in-process A/B of single steps (issue 19's
  notes; ``hybrid-jax bench train`` cannot resolve a step difference that small)."""
  return max(128 if head_dim >= 64 else 64, -(-t // 16))


def folds(folded: bool | None) -> bool:
  """Whether full causal attention takes folded block pairs (``folded``; None: on GPU and
  TPU) rather than one unrolled block per shape (CPU, where the unrolled blocks measured
  faster)."""
  if folded is None:
    folded = dispatch.target_platform() != "cpu"
  return folded


# SWA on CPU block by block (``banded``, which also skips the padding before the first
# key) when the blocks are few and large, else all blocks at once over key strips
# (``strips``): measured once on one core (issue 19's notes), at d256 (8 blocks of 64 rows)
# banded 46 ms against strips 51 ms; at the toy SWA (16 blocks of 16 rows) strips 1.2-1.3x
# faster (the ops per block dominate there). For GPU and TPU always strips: one block shape
# for the compiler to tune.
BANDED_MIN_BLOCK, BANDED_MAX_BLOCKS = 32, 16


def block_by_block(t: int, c: int) -> bool:
  """Whether SWA over T with query blocks of c rows runs block by block (``banded``) rather
  than over key strips (``strips``)."""
  return (dispatch.target_platform() == "cpu" and c >= BANDED_MIN_BLOCK
          and math.ceil(t / c) <= BANDED_MAX_BLOCKS)


# --- the loop over rows ------------------------------------------------------------------------

# Rows at a time pay once the batch's float32 scores outgrow a core's cache (L2: 1 MB a core
# here): XLA:CPU runs each op of the masked softmax over a whole tensor, so one row's strip
# stays in cache across the ~10 passes over it where the batch's goes to memory. ``python -m
# hybrid_jax.bench.kernels --cpu-rows`` (one core, rows against the whole batch): toy full
# attention (5 MB) 1.55x, toy-B4 full (2.5 MB) 1.35x, d256 SWA / full (12 / 18 MB) 1.47x /
# 1.71x, d256-B4 full (9 MB) 1.63x; below the threshold even (toy SWA 1.5 MB: 0.98-1.02x);
# the one loss is d256-B4 SWA (6 MB, 0.92x), left to the rule.
# On more than one core the loop pays only for small heads: at head dim >= 64 the whole
# batch made the two-thread d256 train step 6-8% faster (d256, d256-SSSF, d256-B4), at head
# dim 16 the loop stayed 2-7% ahead (toy, toy-8L, toy-SSSF; in-process A/Bs of whole steps,
# issue 19's notes), though on the op alone the loop still wins at d256 full attention
# (``--cpu-rows`` on two cores: 1.40x). Our reading: a loop is one sequential op in the
# program, and the whole batch's attention can overlap with other work on the second core.
ROW_BY_ROW_MIN_SCORE_BYTES = 9 * 2 ** 18          # 2.25 MB: below it, the whole batch at once
ROW_SCORE_BYTES = 2 ** 20                         # 1 MB: rows per loop step, up to this much
MULTICORE_ROWS_MAX_HEAD_DIM = 32                  # on several cores, the loop only up to this


def rows_per_step(per_row, scores, b, n_kv, head_dim):
  """How many (example, kv head) rows one loop step takes (b * n_kv: the whole batch, no
  loop). ``per_row=None``: rows on a one-device CPU target (``dispatch.one_cpu_device``) once
  the whole batch's ``scores`` (score elements) exceed ROW_BY_ROW_MIN_SCORE_BYTES as float32,
  as many as fit ROW_SCORE_BYTES; on several cores (``dispatch.cpu_threads``) only up to
  MULTICORE_ROWS_MAX_HEAD_DIM. On GPU and TPU the XLA path is a baseline whose rows
  should run in parallel, and under a mesh of several devices the batch is sharded (a loop
  over it would gather it), except inside a shard_map over every axis (each device's own
  rows: CPU data parallelism, ``hybrid_jax.train.step.flat_data_parallel``)."""
  if per_row is None:
    per_row = (dispatch.one_cpu_device() and 4 * scores >= ROW_BY_ROW_MIN_SCORE_BYTES
               and (dispatch.cpu_threads() == 1 or head_dim <= MULTICORE_ROWS_MAX_HEAD_DIM))
  if not per_row:
    return b * n_kv
  return min(b * n_kv, max(1, int(ROW_SCORE_BYTES // max(4 * scores / (b * n_kv), 1))))


# --- kept or recomputed probabilities ---------------------------------------------------------

# On CPU the forward keeps its probabilities for the backward up to this many bytes (float32,
# per call; a row loop stacks its steps'), instead of the flash-style recomputation: one
# score matmul and one exp fewer, for one score-sized write and read. Memory is what a CPU
# has; on GPU and TPU the XLA path is a baseline for the kernels, which recompute, and keeps
# their memory.
KEEP_MAX_BYTES = 2 ** 26                          # 64 MB: d256 at T 512, B 8 keeps 21 MB


def keeps(keep, scores):
  """Whether a call keeps its probabilities (``keep=None``: by KEEP_MAX_BYTES, CPU only)."""
  if keep is None:
    keep = dispatch.target_platform() == "cpu" and 4 * scores <= KEEP_MAX_BYTES
  return keep
