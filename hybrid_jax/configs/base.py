"""The schema every config follows: all keys, their types and defaults.

A config file's ``get_config()`` starts from ``base_config()`` and changes values; keys
that are not here are rejected (the dict is locked), so a typo never silently does nothing.
Shape fields left as ``None`` are filled from ``model.size`` by ``resolve``.
"""

import ml_collections
from ml_collections import config_dict


def base_config() -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()

  c.model = m = ml_collections.ConfigDict()
  m.size = "toy-xs"              # a name from configs/sizes.py, or "custom"
  m.pattern = "SF"               # mixer letters, repeated over the layers (F full, S SWA, H head-wise)
  m.window = 32                  # query i sees keys i - window < j <= i
  m.local_head_fraction = 0.5    # H layers: share of heads that use the window
  m.pos_full = "rope"            # positional scheme of F layers: rope | nope
  m.pos_swa = "rope"             # ... of S layers
  m.pos_headwise = "rope"        # ... of H layers
  m.rope_theta = 10000.0
  m.d_model = config_dict.placeholder(int)
  m.n_layers = config_dict.placeholder(int)
  m.n_heads = config_dict.placeholder(int)
  m.n_kv_heads = config_dict.placeholder(int)
  m.head_dim = config_dict.placeholder(int)   # default d_model // n_heads
  m.d_ff = config_dict.placeholder(int)       # default: the size's, matched to its baseline
  m.vocab_size = 256
  m.tie_embeddings = True
  m.norm_eps = 1e-6
  m.dtype = "float32"            # compute dtype: float32 | bfloat16 (parameters stay float32)
  m.attention_impl = "auto"      # pallas_kernels.swa implementation
  m.swa_block_sizes = config_dict.placeholder(tuple)   # Pallas SWA blocks (forward, dQ, dK/dV); None: defaults
  # Recurrent mixers: M Mamba-2, G Gated DeltaNet, L Lightning attention.
  m.recurrent_impl = "auto"      # pallas_kernels.{linear_scan,delta_rule} implementation
  m.chunk_size = 64              # chunk of the chunked recurrent scans
  m.conv_kernel = 4              # short causal conv of M and G layers
  m.ssm_expand = 2               # M: d_inner = ssm_expand * d_model
  m.ssm_state = 64               # M: state size N
  m.ssm_head_dim = 64            # M: head dim P (heads = d_inner / P)
  m.gdn_expand_v = 2             # G: value head dim = gdn_expand_v * head_dim
  m.remat = "none"               # recompute each block in the backward pass: none | full | save_dots

  c.data = d = ml_collections.ConfigDict()
  d.name = "synthetic"
  d.seq_len = 256
  d.seed = config_dict.placeholder(int)       # default: train.seed
  d.n_pairs = 8                  # key/value pairs per sequence (dense retrieval supervision)
  d.min_distance = 1             # query-to-evidence distance, log-uniform in [min, seq_len]
  d.distance = "log_uniform"     # mix: distance law on [min_distance, seq_len]: log_uniform | uniform
  d.long_fraction = 0.5          # mix: share of long rows (retrieval pairs in prose); the rest short
  d.short_len = 64               # mix: tokens per short document (packed into seq_len rows)
  d.corpus = ""                  # mix: directory from `hybrid-jax data build` ("" = prose from the seed)
  d.tokenizer = "byte"           # "byte", or a sentencepiece model file / data directory holding one
  d.workers = -1                 # grain processes making batches ahead (0: in the training process;
                                 # -1: one per core but one on an accelerator host, 0 on a CPU host)
  d.prefetch = 2                 # batches each worker makes ahead of the step

  c.train = t = ml_collections.ConfigDict()
  t.batch_size = 8
  t.steps = config_dict.placeholder(int)       # overrides the token budget when set
  t.tokens = config_dict.placeholder(int)
  t.tokens_per_param = config_dict.placeholder(float)   # budget as a multiple of N
  t.seed = 0
  t.lr = 3e-3
  t.min_lr_ratio = 0.1
  t.warmup_steps = 50
  t.schedule = "cosine"          # cosine | wsd | constant
  t.decay_fraction = 0.2         # wsd: share of steps spent decaying
  t.weight_decay = 0.1
  t.b1 = 0.9
  t.b2 = 0.95
  t.grad_clip = 1.0
  t.log_every = 10
  t.microbatches = 1             # gradient accumulation: the batch runs in this many equal parts

  c.mesh = h = ml_collections.ConfigDict()
  h.data = -1                    # devices on the data-parallel axis (-1: all the rest)
  h.fsdp = 1                     # devices over which parameters and optimizer state are split

  c.checkpoint = k = ml_collections.ConfigDict()
  k.every = 100                  # latest checkpoint cadence (bounds the work a crash loses)
  k.log_per_octave = 2           # kept log-spaced checkpoints per doubling of steps
  k.log_min_step = 1
  k.async_save = True            # write checkpoints in a thread; the loop waits only for the host copy
  k.root = config_dict.placeholder(str)   # None: <run>/checkpoints; else <root>/<run dir name>,
                                          # e.g. gs://bucket/prefix (run dirs stay on POSIX)

  c.eval = e = ml_collections.ConfigDict()
  e.every = config_dict.placeholder(int)     # training: evaluate every k steps (None: off)
  e.tasks = "all"                # comma-separated hybrid_jax.data.tasks names, "all", or ""
  e.lengths = (512, 1024, 2048)  # context lengths of the synthetic tasks
  e.depths = (0.0, 0.5, 1.0)     # needle depths (fraction of the context before the needle)
  e.examples = 8                 # examples per (task, length, depth)
  e.seed = 1234                  # seed of every evaluation example (same for every run)
  e.batch_tokens = 8192          # rows per forward pass = max(1, batch_tokens // length)
  e.short_length = config_dict.placeholder(int)   # short-context loss length (None: data.seq_len)
  e.short_rows = 32              # held-out sequences for the short-context loss (0: off)
  e.longppl_length = 1024        # LongPPL: length of each long held-out sequence
  e.longppl_rows = 8             # LongPPL: number of long sequences (0: off)
  e.longppl_window = 128         # LongPPL: truncated context (tokens) for key-token selection
  e.longppl_threshold = 2.0      # LongPPL: key token when the loss drops by more (nats)
  e.reference = config_dict.placeholder(str)      # LongPPL key tokens: run dir (None: the model)
  e.reference_step = config_dict.placeholder(int) # ... its checkpoint (None: its latest)
  return c
