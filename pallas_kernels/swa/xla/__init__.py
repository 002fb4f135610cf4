"""Blockwise sliding-window attention in plain XLA: O(T * w) time and memory.

Each query block of C positions attends only to the key blocks that intersect its band:
its own block and the ceil((w - 1) / C) blocks before it (all earlier blocks for full causal
attention); no T x T matrix is ever formed. Forms of the same arithmetic (``attend``): block
by block (``banded``, an unrolled loop over query blocks, each against its slice of keys);
for many small SWA blocks, all blocks at once against key strips gathered per block
(``strips``, two batched einsums); for full causal attention on GPU and TPU, block pairs
folded into one matmul shape (``folded``). The backward is written by hand (flash-style),
under one custom VJP around the loop over (example, kv head) rows (``rows``) that the CPU
path runs once the scores outgrow the cache; on CPU it reads the forward's probabilities
instead of recomputing them. Which form, block, rows and backward: ``policy``; the entry
points: ``attention``."""

from pallas_kernels.swa.xla.attention import full_causal_attention, sliding_window_attention
from pallas_kernels.swa.xla.policy import KEEP_MAX_BYTES, causal_block_size, default_block_size

__all__ = ["sliding_window_attention", "full_causal_attention", "default_block_size",
           "causal_block_size", "KEEP_MAX_BYTES"]
