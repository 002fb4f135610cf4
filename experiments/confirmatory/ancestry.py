"""The rules came first: the confirmatory data's first commit must descend from the last
commit of every rule file, and no rule file may change after it (or be uncommitted while
data exists). Reports print both commits; tests/test_confirmatory.py runs ``problems``."""

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
RULES = Path("experiments/confirmatory/rules")
# The shared rules and the code that turns the data into verdicts: frozen with the rules.
PROTOCOL = tuple(Path("experiments/confirmatory") / f for f in
                 ("protocol.py", "arms.py", "measures.py", "judge.py"))
DATA = Path("experiments/data/confirmatory")


def _git(repo: Path, *args) -> str:
  return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True,
                        check=True).stdout.strip()


def last_commit(repo: Path, path: Path) -> str | None:
  """The newest commit that touched ``path`` (None: never committed)."""
  return _git(repo, "log", "-1", "--format=%H", "--", str(path)) or None


def first_commit(repo: Path, path: Path) -> str | None:
  """The oldest commit that touched ``path`` (None: never committed)."""
  out = _git(repo, "log", "--reverse", "--format=%H", "--", str(path))
  return out.splitlines()[0] if out else None


def is_ancestor(repo: Path, a: str, b: str) -> bool:
  return subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", a, b],
                        capture_output=True).returncode == 0


def rule_files(repo: Path = REPO) -> list[Path]:
  return sorted(p.relative_to(repo) for p in (repo / RULES).glob("*.py")) + list(PROTOCOL)


def commits(repo: Path = REPO) -> dict:
  """{"rules": {file: commit}, "data": first commit of the data (or None)}: what a report prints."""
  return {"rules": {str(p): last_commit(repo, p) for p in rule_files(repo)},
          "data": first_commit(repo, DATA)}


def problems(repo: Path = REPO, rules: list[Path] | None = None, data: Path = DATA) -> list[str]:
  """One line per way the data could have come before its rules; empty when it could not."""
  rules = rule_files(repo) if rules is None else rules
  out = []
  for p in rules:
    if last_commit(repo, p) is None:
      out.append(f"{p}: never committed")
  data_first = first_commit(repo, data)
  if data_first is None:
    return out
  for p in rules:
    if _git(repo, "status", "--porcelain", "--", str(p)):
      out.append(f"{p}: changed since its last commit, while {data} holds data")
    rule = last_commit(repo, p)
    if rule is not None and not is_ancestor(repo, rule, data_first):
      out.append(f"{p}: its last commit {rule[:10]} does not come before the data's first "
                 f"commit {data_first[:10]}")
  return out


def shallow(repo: Path = REPO) -> bool:
  return _git(repo, "rev-parse", "--is-shallow-repository") == "true"
