"""Layer-wise linear probing: which layer's residual stream (or residual delta) at the last
prompt token (the row before the answer, ``answer_positions[0] - 1``) linearly encodes the
needle's value, on closed-set NIAH examples of C classes.

The probe is multinomial logistic regression with an L2 penalty on the weights (sklearn's
convention: minimise sum_i CE_i + |W|^2 / (2 C), C = 0.1 as in the paper), fitted by
L-BFGS-B on the exact gradient. Features are standardised with the training split's mean
and std, so one C means the same for every layer whatever the residual's scale.
"""

import numpy as np
from scipy.optimize import minimize
from scipy.special import log_softmax, softmax

from hybrid_jax.analysis.mechanism import forward as F


class LogisticRegression:
  def __init__(self, c: float = 0.1, max_iter: int = 500):
    self.c, self.max_iter = c, max_iter

  def objective(self, theta, x_NxD, onehot_NxK):
    """(sum_i CE_i + |W|^2 / (2C), its exact gradient) at theta = [W.ravel(), b]."""
    d, k = x_NxD.shape[1], onehot_NxK.shape[1]
    w_DxK, b_K = theta[:d * k].reshape(d, k), theta[d * k:]
    z = x_NxD @ w_DxK + b_K
    loss = -(onehot_NxK * log_softmax(z, -1)).sum() + (w_DxK ** 2).sum() / (2 * self.c)
    dz = softmax(z, -1) - onehot_NxK
    grad_w = x_NxD.T @ dz + w_DxK / self.c
    return loss, np.concatenate([grad_w.ravel(), dz.sum(0)])

  def fit(self, x_NxD, y_N, n_classes: int | None = None):
    x = np.asarray(x_NxD, np.float64)
    y = np.asarray(y_N, int)
    self.mean, self.std = x.mean(0), x.std(0) + 1e-8
    x = (x - self.mean) / self.std
    d = x.shape[1]
    k = n_classes or int(y.max()) + 1
    onehot_NxK = np.eye(k)[y]
    res = minimize(self.objective, np.zeros(d * k + k), args=(x, onehot_NxK), jac=True,
                   method="L-BFGS-B", options=dict(maxiter=self.max_iter))
    self.w, self.b = res.x[:d * k].reshape(d, k), res.x[d * k:]
    return self

  def predict(self, x_NxD):
    x = (np.asarray(x_NxD, np.float64) - self.mean) / self.std
    return (x @ self.w + self.b).argmax(-1)

  def score(self, x_NxD, y_N) -> float:
    return float((self.predict(x_NxD) == np.asarray(y_N)).mean())


def split(n: int, seed: int = 0, train_share: float = 0.8):
  """Deterministic (train, test) index arrays: a seeded permutation cut at 80%."""
  perm = np.random.default_rng(seed).permutation(n)
  cut = min(max(1, int(round(train_share * n))), n - 1)
  return perm[:cut], perm[cut:]


def probe_accuracy(x_NxD, y_N, n_classes: int, seed: int = 0, c: float = 0.1) -> float:
  tr, te = split(len(y_N), seed)
  clf = LogisticRegression(c).fit(x_NxD[tr], y_N[tr], n_classes)
  return clf.score(x_NxD[te], y_N[te])


def residual_features(model, examples, batch: int = 8):
  """Residual stream [N, L+1, D] at each example's last prompt row (index 0: embeddings)."""
  feats = []
  for lo in range(0, len(examples), batch):
    part = examples[lo:lo + batch]
    tokens = np.stack([ex.tokens for ex in part])
    rows = np.array([[ex.answer_positions[0] - 1] for ex in part])
    resid = F.forward(model, tokens, rows, want=("resid",))["resid"]   # [B, L+1, 1, D]
    feats.append(np.asarray(resid[:, :, 0], np.float64))
  return np.concatenate(feats)


def layer_probe(model, examples, n_classes: int, delta: bool = False, seed: int = 0) -> dict:
  """Probe accuracy after each layer (or of each layer's residual delta)."""
  x_NxLxD = residual_features(model, examples)
  y_N = np.array([ex.answer_class for ex in examples])
  feats = np.diff(x_NxLxD, axis=1) if delta else x_NxLxD[:, 1:]
  acc = [probe_accuracy(feats[:, l], y_N, n_classes, seed) for l in range(feats.shape[1])]
  return dict(accuracy=acc, chance=1.0 / n_classes, delta=delta,
              train_test=[len(s) for s in split(len(y_N), seed)])
