"""The template every finding's report is written from: a title, the command paragraph, then
blocks (the rules, sections, tables, verdicts), one blank line apart. A run.py fills it in
the order its report reads; ``text()`` is the whole file (``runner.write`` writes it).

    report = Report("Title", "Command: ... regenerates this report ...")
    report.add(V.rules_section(...))
    report.section("Question", "...")
    report.add(V.verdicts_section(judged))
    runner.write(inv, report.text())

A block is a string as the report prints it; an empty one still takes its place (two blank
lines), as a blank optional paragraph did in the reports' first hand-joined form. The
calibration tables of experiments/README.md are a report without title or command: ``body()``.
"""

import dataclasses


EXPLORATORY = (
    "**Exploratory.** This report's seeds are the study's first ones, and its verdict rules and "
    "margins were written after their first results (issue 47). Every verdict below is "
    "exploratory and none is counted in the confirmatory summary: "
    "`experiments/confirmatory/REPORT.md` tests one primary claim per finding on 7 fresh seeds "
    "per arm, under rules committed before those seeds were trained.")


@dataclasses.dataclass
class Report:
  title: str | None = None
  command: str | None = None
  blocks: list[str] = dataclasses.field(default_factory=list)
  exploratory: bool = True       # a finding's report from the first seeds (see EXPLORATORY)

  def add(self, *blocks: str) -> "Report":
    """Blocks as they are printed: a table, a paragraph, a section made elsewhere."""
    self.blocks.extend(blocks)
    return self

  def section(self, heading: str, *paragraphs: str) -> "Report":
    """``## heading`` and its paragraphs (the first right under the heading line)."""
    return self.add(f"## {heading}\n" + "\n\n".join(paragraphs))

  def body(self) -> str:
    """The blocks, one blank line apart."""
    return "\n\n".join(self.blocks)

  def text(self) -> str:
    """REPORT.md: ``# title``, the command, the exploratory label, the blocks; one newline
    at the end."""
    head = [f"# {self.title}", self.command] + ([EXPLORATORY] if self.exploratory else [])
    return "\n\n".join(head + [self.body()]) + "\n"
