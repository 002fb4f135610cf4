"""One file per finding: its primary claim, its secondary claims, every metric, margin and
threshold. Frozen: ``experiments/confirmatory/ancestry.py`` (and tests/test_confirmatory.py)
fails when the confirmatory data's first commit does not descend from a file's last commit."""

FINDINGS = ("scaling", "full_attention", "laziness", "nope")
