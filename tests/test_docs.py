"""The documentation holds together: README.md is the entry point and every reference file
in docs/ is reachable from it (directly or through docs/README.md), and no relative link in
either points at a file that is not there."""

import re

from docs_text import ROOT, doc_files

LINK = re.compile(r"\]\(([^)\s]+)\)")      # [text](target), the text may span lines


def relative_links(path) -> list[str]:
  """The targets of a file's Markdown links that are neither URLs nor in-page anchors."""
  targets = LINK.findall(path.read_text())
  return [t for t in targets if not re.match(r"[a-z][a-z0-9+.-]*:", t) and not t.startswith("#")]


def test_every_docs_file_is_linked_from_the_readme_or_the_docs_index():
  linked = {(p.parent / t.split("#")[0]).resolve()
            for p in (ROOT / "README.md", ROOT / "docs" / "README.md") for t in relative_links(p)}
  docs = sorted((ROOT / "docs").glob("*.md"))
  assert len(docs) > 10 and (ROOT / "docs" / "README.md").resolve() in linked
  unlinked = [str(p.relative_to(ROOT)) for p in docs if p.resolve() not in linked]
  assert not unlinked, f"docs files neither README.md nor docs/README.md links: {unlinked}"


def test_every_relative_link_points_at_a_file_that_exists():
  broken = [f"{p.relative_to(ROOT)}: {t}" for p in doc_files() for t in relative_links(p)
            if not (p.parent / t.split("#")[0]).exists()]
  assert not broken, f"links to files that do not exist: {broken}"


def anchor(heading: str) -> str:
  """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
  return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_every_link_into_a_section_names_a_heading_of_its_file():
  bad = []
  for p in doc_files():
    for t in relative_links(p):
      if "#" in t:
        target, part = t.split("#", 1)
        headings = re.findall(r"^#+ (.+)$", (p.parent / target).read_text(), re.M)
        if part not in {anchor(h) for h in headings}:
          bad.append(f"{p.relative_to(ROOT)}: {t}")
  assert not bad, f"links to sections that do not exist: {bad}"


def test_the_configs_doc_lists_every_key_with_its_defaults():
  """docs/configs.md's key table: every key of the schema once, its base default, and the toy
  default's value where that differs (blank where it does not)."""
  from hybrid_jax.configs.base import base_config
  from hybrid_jax.configs.default import get_config
  base, toy = base_config(), get_config()
  text = (ROOT / "docs" / "configs.md").read_text().split("## Every key", 1)[1]
  rows = [[c.strip() for c in line.strip().strip("|").split("|")]
          for line in text.splitlines() if line.startswith("| `")]
  keys = [f"{s}.{k}" for s in base.keys() for k in base[s].keys()]
  assert [r[0].strip("`") for r in rows] == keys
  for (key, default, toy_default, what) in rows:
    section, name = key.strip("`").split(".")
    b, t = base[section][name], toy[section][name]
    assert default == f"`{b!r}`" and toy_default == ("" if t == b else f"`{t!r}`"), key
    assert what, key


def test_the_link_check_sees_links_and_skips_urls_and_anchors(tmp_path):
  page = tmp_path / "page.md"
  page.write_text("[a](docs/x.md#part) [b\nc](../y.md) [u](https://example.org/z) [s](#here)")
  assert relative_links(page) == ["docs/x.md#part", "../y.md"]
  assert anchor("Export to Hugging Face transformers") == "export-to-hugging-face-transformers"
  assert anchor("Scaling-law fits") == "scaling-law-fits"
