"""Training curves of one run: loss and retrieval-answer accuracy against tokens."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from hybrid_jax.plot.axes import readable_scale  # noqa: E402


def write_training_curves(run, name="curves.png"):
  records = run.read_metrics()
  if not records:
    return None
  tokens = [r["tokens"] for r in records]
  fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(10, 3.6))
  ax_loss.plot(tokens, [r["loss"] for r in records], label="all tokens")
  ax_loss.plot(tokens, [r["answer_loss"] for r in records], label="retrieval answers")
  ax_loss.set(xlabel="training tokens", ylabel="loss", title="loss")
  readable_scale(ax_loss, "y", [r[k] for r in records for k in ("loss", "answer_loss")])
  ax_loss.legend()
  ax_acc.plot(tokens, [r["answer_acc"] for r in records])
  ax_acc.set(xlabel="training tokens", ylabel="accuracy", title="retrieval-answer accuracy",
             ylim=(0, 1))
  for ax in (ax_loss, ax_acc):
    readable_scale(ax, "x", tokens)
    ax.grid(alpha=0.3)
  fig.suptitle(run.path.name)
  fig.tight_layout()
  path = run.path / name
  tmp = path.with_name(f".{name}.tmp.png")
  fig.savefig(tmp, dpi=110)
  plt.close(fig)
  tmp.replace(path)
  return path
