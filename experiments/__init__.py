"""The paper's findings reproduced at toy scale: one folder per finding (``sweep.py``, the
runs; ``run.py``, train what is missing and write ``REPORT.md``), and ``toy_study``, the
code they share. An importable package (``pip install -e .`` installs it next to
hybrid_jax). Every command it prints is ``python -m experiments.<finding>.run``: that works
from the repository root, installed or not; ``python`` on the runner's file works only once
installed (a script's ``sys.path`` starts at its own folder, not at the root)."""
