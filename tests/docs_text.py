"""The project's documentation as tests read it: README.md, the entry point, and the
reference files under docs/ that moved out of it, so a check of the text holds wherever the
text lives."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def doc_files() -> list[Path]:
  """README.md first, then every docs/*.md."""
  return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def docs_text() -> str:
  return "\n".join(p.read_text() for p in doc_files())
