"""The PyTorch peer of ``hybrid-jax bench train --peer``: the same network written plainly in
PyTorch, timed in its own process beside the project.

Copied from the project's shared PyTorch reference ``peers/torch_hybrid.py``: the network, the
optimizer and the step are unchanged; added are ``--threads``, which pins torch's intra-op
threads so both sides run on the same number of cores, ``--serve`` (a long-lived worker of
the bench: once warmed up it prints a JSON line, then each line ``n`` on stdin runs ``n``
timed steps and prints their wall seconds) and a ``__main__`` guard. Same architecture as
hybrid_jax's attention hybrids:
token embedding (tied head), pre-norm blocks of RMSNorm -> attention (RoPE, GQA; S layers see
keys i-w < j <= i, F layers are causal) -> RMSNorm -> SwiGLU MLP, final RMSNorm; AdamW (b1 0.9,
b2 0.95, wd 0.1) with global norm clipping 1.0; cross-entropy on random tokens. Prints one
JSON line: the median step time of ``--steps`` steps after warm-up, and tokens/s.

    python -m hybrid_jax.bench.torch_peer --d-model 256 --layers 4 --heads 4 --kv-heads 2 \
        --d-ff 640 --window 128 --pattern SF --seq-len 512 --batch 8 [--mode eager|compile]

Needs torch (the CPU wheel is enough); torch is not a dependency of the project.
"""
import argparse, json, time

if __name__ != "__main__":
  raise ImportError("hybrid_jax.bench.torch_peer is a script: python -m hybrid_jax.bench.torch_peer")

import torch

import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
for name, default in [("d-model", 256), ("layers", 4), ("heads", 4), ("kv-heads", 2), ("d-ff", 640),
                      ("vocab", 256), ("window", 128), ("seq-len", 512), ("batch", 8), ("steps", 10)]:
  p.add_argument(f"--{name}", type=int, default=default)
p.add_argument("--pattern", default="SF")
p.add_argument("--mode", choices=["eager", "compile"], default="eager")
p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
p.add_argument("--serve", action="store_true", help="time blocks of steps on request (stdin)")
a = p.parse_args()
if a.threads:
  torch.set_num_threads(a.threads)
torch.manual_seed(0)
D, H, KV, T, B, W = a.d_model, a.heads, a.kv_heads, a.seq_len, a.batch, a.window
hd = D // H
ang = torch.arange(T)[:, None] * (1.0 / 10000 ** (torch.arange(0, hd, 2).float() / hd))[None]
COS, SIN = ang.cos()[None, None], ang.sin()[None, None]
i = torch.arange(T)
BAND = (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - W)


def rope(x):
  x1, x2 = x[..., : hd // 2], x[..., hd // 2:]
  return torch.cat([x1 * COS - x2 * SIN, x2 * COS + x1 * SIN], -1)


class RMSNorm(nn.Module):
  def __init__(self, d):
    super().__init__()
    self.w = nn.Parameter(torch.ones(d))

  def forward(self, x):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w


class Block(nn.Module):
  def __init__(self, local):
    super().__init__()
    self.local = local
    self.n1, self.n2 = RMSNorm(D), RMSNorm(D)
    self.q = nn.Linear(D, H * hd, bias=False)
    self.k = nn.Linear(D, KV * hd, bias=False)
    self.v = nn.Linear(D, KV * hd, bias=False)
    self.o = nn.Linear(H * hd, D, bias=False)
    self.gate = nn.Linear(D, a.d_ff, bias=False)
    self.up = nn.Linear(D, a.d_ff, bias=False)
    self.down = nn.Linear(a.d_ff, D, bias=False)

  def forward(self, x):
    h = self.n1(x)
    q = rope(self.q(h).view(B, T, H, hd).transpose(1, 2))
    k = rope(self.k(h).view(B, T, KV, hd).transpose(1, 2))
    v = self.v(h).view(B, T, KV, hd).transpose(1, 2)
    if self.local:
      o = F.scaled_dot_product_attention(q, k, v, attn_mask=BAND, enable_gqa=True)
    else:
      o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    x = x + self.o(o.transpose(1, 2).reshape(B, T, H * hd))
    h = self.n2(x)
    return x + self.down(F.silu(self.gate(h)) * self.up(h))


class LM(nn.Module):
  def __init__(self):
    super().__init__()
    self.emb = nn.Embedding(a.vocab, D)
    self.blocks = nn.ModuleList(Block(a.pattern[j % len(a.pattern)] == "S") for j in range(a.layers))
    self.norm = RMSNorm(D)

  def forward(self, tokens):
    x = self.emb(tokens)
    for block in self.blocks:
      x = block(x)
    return self.norm(x) @ self.emb.weight.T


model = LM()
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1)


def step(x, y):
  loss = F.cross_entropy(model(x).reshape(-1, a.vocab), y.reshape(-1))
  opt.zero_grad(set_to_none=True)
  loss.backward()
  torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
  opt.step()
  return loss


if a.mode == "compile":
  step = torch.compile(step)
data = torch.randint(0, a.vocab, (a.steps + 2, B, T + 1))
for s in range(2):
  step(data[s, :, :-1], data[s, :, 1:])


def timed(first, n):
  times = []
  for s in range(first, first + n):
    batch = data[s % len(data)]
    t0 = time.perf_counter()
    step(batch[:, :-1], batch[:, 1:])
    times.append(time.perf_counter() - t0)
  return times


if a.serve:
  import sys
  print(json.dumps(dict(peer=f"torch-{a.mode}", threads=torch.get_num_threads())), flush=True)
  done = 2
  for line in sys.stdin:
    times = timed(done, int(line))
    done += len(times)
    print(json.dumps(dict(step_s=times)), flush=True)
else:
  times = timed(2, a.steps)
  dt = sorted(times)[len(times) // 2]
  print(json.dumps(dict(peer=f"torch-{a.mode}", threads=torch.get_num_threads(), step_s=dt,
                        tokens_per_s=B * T / dt)))
