"""reStructuredText to plain prose: keep paragraphs and the bodies of notes and API
descriptions; drop code (literal blocks, doctests, code directives), markup, tables, labels."""

import re

# Directives whose indented body is prose worth keeping (the directive line itself is dropped).
KEEP_BODY = frozenset("""
note warning seealso versionadded versionchanged deprecated deprecated-removed impl-detail
function method class data attribute exception decorator decoratormethod classmethod
staticmethod coroutinefunction coroutinemethod abstractmethod property module
c:function c:member c:type c:var c:macro c:struct c:data envvar cmdoption option describe
opcode pdbcommand glossary topic sidebar admonition important tip hint caution attention
danger error rubric centered hlist
""".split())

_DIRECTIVE = re.compile(r"^(\s*)\.\.\s+([\w:-]+)::(.*)$")
_EXPLICIT = re.compile(r"^(\s*)\.\.(\s|$)")           # comments, labels, substitutions
_RULE = re.compile(r"^\s*([=\-~*^\"#+`'.:_])\1{2,}\s*$")
_TABLE_RULE = re.compile(r"^\s*[+|][-=+|\s]*$")
_ROLE = re.compile(r":[\w:.-]+:`([^`]*)`")
_REF = re.compile(r"`([^`<]*?)\s*<[^`>]*>`_{1,2}")
_NAMED = re.compile(r"`([^`]+)`_{1,2}")
_LITERAL = re.compile(r"``([^`]+)``")
_EMPH = re.compile(r"\*\*([^*]+)\*\*|\*([^*\s][^*]*)\*")


def _inline(text: str) -> str:
  def role(m):
    inner = m.group(1).lstrip("!~")
    inner = re.sub(r"\s*<[^>]*>$", "", inner) if "<" in inner else inner
    return inner
  text = _ROLE.sub(role, text)
  text = _REF.sub(r"\1", text)
  text = _NAMED.sub(r"\1", text)
  text = _LITERAL.sub(r"\1", text)
  text = _EMPH.sub(lambda m: m.group(1) or m.group(2), text)
  return text.replace("\\ ", "").replace("|", "")


def _indent(line: str) -> int:
  return len(line) - len(line.lstrip())


def rst_to_text(src: str) -> str:
  """Paragraphs (one line each) separated by blank lines."""
  lines = src.replace("\t", "    ").split("\n")
  out, para = [], []
  skip_deeper_than = None       # drop blank lines and lines indented deeper than this
  skip_options = None           # drop ``:option:`` lines right after a kept directive

  def flush():
    if para:
      text = " ".join(para).strip()
      if text and not text.startswith(">>>"):
        out.append(_inline(text))
      para.clear()

  for line in lines:
    stripped = line.strip()
    if skip_deeper_than is not None:
      if not stripped or _indent(line) > skip_deeper_than:
        continue
      skip_deeper_than = None
    if skip_options is not None:
      if stripped.startswith(":") and _indent(line) > skip_options:
        continue
      skip_options = None
    if not stripped:
      flush()
      continue
    m = _DIRECTIVE.match(line)
    if m:
      flush()
      if m.group(2) in KEEP_BODY:
        skip_options = _indent(line)
        args = m.group(3).strip()
        if m.group(2) in ("rubric", "centered", "topic", "sidebar", "admonition") and args:
          out.append(_inline(args))
      else:
        skip_deeper_than = _indent(line)
      continue
    if _EXPLICIT.match(line):
      flush()
      skip_deeper_than = _indent(line)
      continue
    if _RULE.match(line) or _TABLE_RULE.match(line) or stripped.startswith((">>>", "...")):
      if not _RULE.match(line):
        flush()
      continue
    if stripped.endswith("::"):   # a literal block follows
      text = stripped[:-2].rstrip()
      if text:
        para.append(text + ":")
      flush()
      skip_deeper_than = _indent(line)
      continue
    para.append(stripped)
  flush()
  return "\n\n".join(p for p in out if p.strip())
