"""What a source file imports, read from its syntax tree (the tests of the package layout)."""

import ast
from pathlib import Path


def imported_modules(path: Path) -> set[str]:
  """Every module an import statement of ``path`` names, at any depth (function bodies too)."""
  names = set()
  for node in ast.walk(ast.parse(Path(path).read_text())):
    if isinstance(node, ast.Import):
      names |= {a.name for a in node.names}
    elif isinstance(node, ast.ImportFrom) and node.module:
      names.add(node.module)
  return names
