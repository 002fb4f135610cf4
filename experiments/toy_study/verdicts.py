"""Pre-registered claims and the one rule that decides each verdict.

A runner states its claims as ``Claim`` constants (what is measured, the margin, which side
the paper predicts) before it reads any result; its report prints them first, in the
"Metrics and verdict rules" section, and then judges every claim by ``decide`` from the
claim's bootstrap interval, whichever way it falls. A claim whose test cannot fail by
construction (e.g. capping a window-4 layer at 4) is judged "inconclusive" with the reason.
"""

import dataclasses
import math

from experiments.toy_study.bootstrap import Interval

REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE = "reproduced", "not reproduced", "inconclusive"

RULE = ("A claim is **reproduced** when the whole 95% bootstrap interval of its effect lies "
        "beyond the margin on the paper's side; **not reproduced** when the whole interval "
        "lies on the other side (at or short of the margin); **inconclusive** when the "
        "interval straddles the margin, or when the test cannot fail by construction (the "
        "reason is given). For a claim of no difference (\"within ±m\") it is reproduced when "
        "the whole interval lies within ±m, not reproduced when it lies wholly outside, and "
        "inconclusive otherwise. Intervals: percentile bootstrap, "
        "2,000 draws, resampling seeds and, for accuracies, the examples of every evaluated "
        "cell; a fixed generator seed, so the report is byte-stable.")


@dataclasses.dataclass(frozen=True)
class Claim:
  key: str
  paper: str       # what the paper says, in one sentence
  effect: str      # the measured effect, exactly
  margin: float
  side: str        # "above": the paper predicts effect > margin; "below": < margin;
                   # "within": |effect| <= margin

  def rule(self) -> str:
    m = f"{self.margin:g}"
    return {"above": f"effect > {m}", "below": f"effect < {m}",
            "within": f"|effect| <= {m}"}[self.side]


def decide(claim: Claim, iv: Interval, cannot_fail: str | None = None) -> str:
  """The verdict of ``claim`` from its interval (``cannot_fail``: why the test is void)."""
  if cannot_fail or iv.n_seeds == 0 or math.isnan(iv.lo) or math.isnan(iv.hi):
    return INCONCLUSIVE
  m = claim.margin
  if claim.side == "above":
    return REPRODUCED if iv.lo > m else NOT_REPRODUCED if iv.hi <= m else INCONCLUSIVE
  if claim.side == "below":
    return REPRODUCED if iv.hi < m else NOT_REPRODUCED if iv.lo >= m else INCONCLUSIVE
  if -m <= iv.lo and iv.hi <= m:
    return REPRODUCED
  return NOT_REPRODUCED if (iv.lo > m or iv.hi < -m) else INCONCLUSIVE


def rules_section(metrics: list[tuple[str, str]], claims: list[Claim], extra: str = "") -> str:
  """The report's first section: every metric it prints, every claim with its margin, and
  the rule, from the runner's constants. These rules were written after the first seeds'
  results (issue 47), so the section says so; the confirmatory rules are the ones frozen first."""
  lines = ["## Metrics and verdict rules",
           "Written in the runner's code after this study's first results were read (exploratory; "
           "see above); every metric below is "
           "printed in the results whether it favours the paper or not.", "",
           "Metrics:"]
  lines += [f"- **{name}**: {what}" for name, what in metrics]
  lines += ["", "Claims (the effect, and the margin it must clear on the paper's side):", ""]
  rows = [[c.key, c.paper, c.effect, c.rule()] for c in claims]
  lines.append(_table(["claim", "the paper says", "effect", "paper's side"], rows))
  lines += ["", RULE]
  if extra:
    lines += ["", extra]
  return "\n".join(lines)


@dataclasses.dataclass
class Judged:
  claim: Claim
  interval: Interval
  verdict: str
  note: str = ""            # what the numbers say, printed whatever the verdict
  fmt: object = None        # how to print the effect


def judge(claim: Claim, iv: Interval, note: str = "", cannot_fail: str | None = None,
          fmt=None) -> Judged:
  text = note + (f" The test cannot fail by construction: {cannot_fail}" if cannot_fail else "")
  return Judged(claim, iv, decide(claim, iv, cannot_fail), text.strip(), fmt)


def verdicts_section(judged: list[Judged]) -> str:
  rows = [[j.claim.key, j.claim.effect,
           j.interval.fmt(j.fmt) if j.fmt else str(j.interval), j.claim.rule(),
           f"**{j.verdict}**"] for j in judged]
  lines = ["## Verdicts", "",
           _table(["claim", "effect", "estimate [95% interval]", "paper's side", "verdict"], rows),
           ""]
  lines += [f"- {j.claim.key} ({j.verdict}): {j.note}" for j in judged if j.note]
  counts = {v: sum(j.verdict == v for j in judged)
            for v in (REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE)}
  lines += ["", "Summary (exploratory, not counted in the confirmatory summary): "
            + ", ".join(f"{n} {v}" for v, n in counts.items()) + "."]
  return "\n".join(lines)


def tokens_fmt(budget: float):
  """A token count in millions; +inf (censored) as "> the budget"."""
  def f(x):
    if math.isinf(x):
      return f"> {budget / 1e6:.2f}M"
    return f"{x / 1e6:.2f}M"
  return f


def _table(header, rows) -> str:
  out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
  out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
  return "\n".join(out)
