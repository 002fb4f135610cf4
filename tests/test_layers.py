"""The import graph of hybrid_jax, pallas_kernels and experiments follows the layer order
written in the README (imports at any depth, inside functions too): no import reaches a
higher layer, no cycle between modules or between packages, no private name imported from
another module. And the README's layout table names exactly what the tree holds."""

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ROOTS = ("hybrid_jax", "pallas_kernels", "experiments")
README = (ROOT / "README.md").read_text()


def modules() -> dict[str, Path]:
  out = {}
  for top in ROOTS:
    for path in sorted((ROOT / top).rglob("*.py")):
      rel = path.relative_to(ROOT).with_suffix("")
      parts = rel.parts[:-1] if rel.name == "__init__" else rel.parts
      out[".".join(parts)] = path
  return out


MODULES = modules()


def imports(name: str, path: Path):
  """(imported module, names taken from it, line) for every project import in the file."""
  is_package = path.name == "__init__.py"
  for node in ast.walk(ast.parse(path.read_text(), str(path))):
    if isinstance(node, ast.Import):
      for alias in node.names:
        if alias.name.split(".")[0] in ROOTS:
          yield alias.name, [], node.lineno
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:
        package = name.split(".")[: len(name.split(".")) - node.level + is_package]
        base = ".".join(package + ([base] if base else []))
      if base.split(".")[0] not in ROOTS:
        continue
      plain = []
      for alias in node.names:              # ``from pkg import module``: an edge to the module
        if f"{base}.{alias.name}" in MODULES:
          yield f"{base}.{alias.name}", [], node.lineno
        else:
          plain.append(alias.name)
      if plain:
        yield base, plain, node.lineno


def target(imported: str) -> str | None:
  """The project module an import refers to (the longest known prefix)."""
  parts = imported.split(".")
  for n in range(len(parts), 0, -1):
    if ".".join(parts[:n]) in MODULES:
      return ".".join(parts[:n])
  return None


EDGES = [(src, target(dst), names, line) for src, path in MODULES.items()
         for dst, names, line in imports(src, path) if target(dst) not in (None, src)]


def readme_layers() -> list[list[str]]:
  """The layer block of the README: indented lines after the "Layers, bottom first" line,
  each ``name name ...: why``."""
  block = README.split("Layers, bottom first", 1)[1].split("\n\n", 2)[1]
  return [line.split(":")[0].split() for line in block.splitlines() if line.strip()]


LAYERS = readme_layers()


def unit_of(module: str) -> tuple[int, str]:
  """(layer, unit): the longest name of the layer order that holds ``module``; units are
  whole packages (``hybrid_jax.train``) or top-level modules (``hybrid_jax.resolve``)."""
  best = None
  for i, names in enumerate(LAYERS):
    for n in names:
      exact_only = n == "hybrid_jax"          # the package itself, not everything under it
      if module == n or (not exact_only and module.startswith(n + ".")):
        if best is None or len(n) > len(best[1]):
          best = (i, n)
  if best is None:
    raise AssertionError(f"{module} belongs to no layer of the README's layer order")
  return best


def layer_of(module: str) -> int:
  return unit_of(module)[0]


def package_of(module: str) -> str:
  """The package (or top-level module) of the tree that holds ``module``, one level below its
  root (so that two subpackages of pallas_kernels or experiments may not form a cycle
  either), whatever the README lists."""
  return module if module in ROOTS else ".".join(module.split(".")[:2])


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """Strongly connected components of more than one node (Tarjan)."""
  index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

  def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on.add(v)
    for w in graph.get(v, ()):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      comp = []
      while True:
        w = stack.pop()
        on.discard(w)
        comp.append(w)
        if w == v:
          break
      if len(comp) > 1:
        out.append(sorted(comp))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return out


def test_the_layer_order_is_written_and_every_module_has_a_layer():
  assert len(LAYERS) >= 8
  names = [n for layer in LAYERS for n in layer]
  assert len(names) == len(set(names)), "a name listed in two layers"
  for n in names:
    assert n in MODULES, f"the README's layer order names {n}, which is no module"
  for module in MODULES:
    layer_of(module)


def test_every_unit_of_the_layer_order_is_a_whole_package_or_top_level_module():
  """A package's module listed as a layer of its own would let the package sit on both sides
  of another (``hybrid_jax.eval.settings`` once did: eval imported resolve and train, and
  resolve imported eval's settings), a cycle between packages hidden by the layer order."""
  names = [n for layer in LAYERS for n in layer]
  split = [n for n in names if n.count(".") > 1       # listed ``hybrid_jax`` is its __init__ only
           or any(n.startswith(m + ".") for m in names if m != "hybrid_jax")]
  assert not split, f"the README's layer order lists part of a package as a unit: {split}"


def test_no_import_reaches_a_higher_layer():
  bad = [f"{MODULES[src].relative_to(ROOT)}:{line}: {src} (layer {layer_of(src) + 1}) imports "
         f"{dst} (layer {layer_of(dst) + 1})"
         for src, dst, _, line in EDGES if layer_of(dst) > layer_of(src)]
  assert not bad, "\n".join(bad)


def test_no_cycle_between_modules():
  graph = defaultdict(set)
  for src, dst, _, _ in EDGES:
    if not MODULES[dst].name == "__init__.py" or not src.startswith(dst + "."):
      graph[src].add(dst)      # a module of a package importing its own __init__ is no cycle
  assert not cycles(graph)


def test_no_cycle_between_packages():
  graph = defaultdict(set)
  for src, dst, _, _ in EDGES:
    if package_of(src) != package_of(dst):
      graph[package_of(src)].add(package_of(dst))
  assert not cycles(graph)


def test_the_kernels_import_nothing_of_hybrid_jax():
  """pallas_kernels is the bottom layer: its benchmarks and device check live above it."""
  up = [f"{MODULES[src].relative_to(ROOT)}:{line}: {src} imports {dst}"
        for src, dst, _, line in EDGES if src.startswith("pallas_kernels") and dst.startswith("hybrid_jax")]
  assert not up, "\n".join(up)
  assert LAYERS[0] == ["pallas_kernels"]


def test_every_command_is_a_module_of_the_commands_package_at_the_top():
  """The commands' mains live in one package, the top layer of hybrid_jax: no library imports
  a command (only experiments, above, may)."""
  from hybrid_jax.cli import COMMANDS, SUBCOMMANDS
  named = [m for m, _ in COMMANDS.values()] + [m for m, _ in SUBCOMMANDS.values()]
  assert all(m.startswith("hybrid_jax.commands.") and m in MODULES for m in named), named
  assert LAYERS[-2] == ["hybrid_jax.commands"] and LAYERS[-1] == ["experiments"]
  up = [f"{MODULES[src].relative_to(ROOT)}:{line}: {src} imports {dst}"
        for src, dst, _, line in EDGES if dst.startswith("hybrid_jax.commands")
        and not src.startswith(("hybrid_jax.commands", "experiments"))]
  assert not up, "\n".join(up)


def test_no_private_name_is_imported_from_another_module():
  bad = [f"{MODULES[src].relative_to(ROOT)}:{line}: {n} from {dst}"
         for src, dst, names, line in EDGES for n in names
         if n.startswith("_") and not n.startswith("__")]
  for src, path in MODULES.items():          # ``module._name`` on an imported module
    tree = ast.parse(path.read_text())
    aliases = {}
    for node in ast.walk(tree):
      if isinstance(node, (ast.Import, ast.ImportFrom)):
        for dst, names, _ in imports(src, path):
          if not names and target(dst) not in (None, src):
            aliases[dst.split(".")[-1]] = dst
        for alias in node.names:
          if alias.asname and alias.name.split(".")[-1] in aliases:
            aliases[alias.asname] = aliases[alias.name.split(".")[-1]]
    for node in ast.walk(tree):
      if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
          and node.value.id in aliases and node.attr.startswith("_")
          and not node.attr.startswith("__")):
        bad.append(f"{path.relative_to(ROOT)}:{node.lineno}: {aliases[node.value.id]}.{node.attr}")
  assert not bad, "\n".join(bad)


def test_the_checks_catch_what_they_are_for():
  """The graph helpers are not vacuous: a cycle, an upward edge and an unknown module fail."""
  assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
  assert package_of("hybrid_jax.commands.train") == "hybrid_jax.commands"   # a package, one node
  assert layer_of("hybrid_jax.run.rundir") < layer_of("hybrid_jax.train.loop")
  with pytest.raises(AssertionError):
    layer_of("somewhere_else.module")
  assert any(dst == "hybrid_jax.run.rundir" for _, dst, _, _ in EDGES)


# --- the layout table ---------------------------------------------------------------------

def layout_paths() -> list[str]:
  table = README.split("## Layout", 1)[1].split("\n\n", 2)[1]
  rows = [line for line in table.splitlines() if line.startswith("| `")]
  return [p for row in rows for p in re.findall(r"`([^`]+)`", row.split("|")[1])]


def test_every_path_the_layout_table_names_exists():
  paths = layout_paths()
  assert len(paths) > 20
  missing = [p for p in paths if not (ROOT / p.rstrip("/")).exists()]
  assert not missing, f"the README's layout table names paths that do not exist: {missing}"


def test_the_layout_table_names_every_module_directory_and_top_level_module():
  named = {p.rstrip("/") for p in layout_paths()}
  dirs = {str(p.parent.relative_to(ROOT)) for top in ROOTS[:2] for p in (ROOT / top).rglob("*.py")}
  top_modules = {str(p.relative_to(ROOT)) for p in (ROOT / "hybrid_jax").glob("*.py")
                 if p.name != "__init__.py"}
  unnamed = sorted((dirs | top_modules) - named)
  assert not unnamed, f"the README's layout table does not name {unnamed}"
