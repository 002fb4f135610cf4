"""The paper's findings reproduced at toy scale: one folder per finding (``sweep.py``, the
runs; ``run.py``, train what is missing and write ``REPORT.md``), and ``toy_study``, the
code they share. An importable package (``pip install -e .`` installs it next to
hybrid_jax), so ``python experiments/<finding>/run.py`` and
``python -m experiments.<finding>.run`` both work."""
