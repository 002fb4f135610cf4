"""What ``train`` shows while it runs: a progress bar on a terminal (step, tokens, loss,
tokens/s, refreshed every ``train.log_every`` steps), nothing when not on a terminal or with
``--quiet`` (a sweep's workers log to files)."""

import sys

from tqdm import tqdm


class Progress:
  def __init__(self, start: int, total: int, *, enabled: bool | None):
    """``enabled=None``: only when stderr is a terminal."""
    self.bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True, file=sys.stderr,
                    disable=None if enabled is None else not enabled, desc="train")

  def logged(self, record: dict):
    self.bar.set_postfix(tokens=f"{record['tokens']:.3g}", loss=f"{record['loss']:.4f}",
                         tok_s=f"{record['tokens_per_s']:.3g}")

  def step(self):
    self.bar.update(1)

  def close(self):
    self.bar.close()
