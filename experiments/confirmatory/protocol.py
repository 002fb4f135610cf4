"""What every confirmatory rule file shares: the fresh seeds, the arms, the claim record, the
statistics and the verdict rule. Written and committed before any confirmatory run was
trained; ``ancestry`` checks that the data came after it.

Why a confirmatory set at all: the exploratory study (seeds 0-2, ``experiments/data/toy_study``)
set its margins with results in view and judged 52 claims at three seeds. Here one primary
claim per finding is tested on seeds no rule has seen, at least 7 per arm; secondary claims
are Holm-corrected within their finding; the exploratory results stay in the reports,
labelled so, and out of the summary count.
"""

import dataclasses

from experiments.toy_study import config as T

SEEDS = tuple(range(100, 107))        # 7 fresh seeds per primary arm (exploratory: 0, 1, 2)
BUDGET = T.BUDGET                     # 30 N tokens, the exploratory runs' budget
READ_AT = (10.0, 20.0, 30.0)          # budgets (tokens per parameter) where curves are read
ALPHA = 0.05                          # each primary claim; secondaries: Holm within the finding
THRESHOLD = 0.25                      # far accuracy taken as "emerged" (chance 1/64)
RETRIEVES = 0.5                       # final far accuracy at or above which a seed retrieves
BEYOND = max(T.WINDOWS.values())      # far = distance bins wholly beyond every window (d >= 32)
EVAL_TASKS = ("kv_recall", "kv_recall_start")   # the second: the fact at offset 0 (position vs distance)


@dataclasses.dataclass(frozen=True)
class Arm:
  """One trained model of the set, as a grid point of ``toy_study.config.point``."""
  label: str
  pattern: str
  window: str | None = None           # a size name of toy_study.config.WINDOWS
  pos_full: str = "rope"
  seeds: tuple = SEEDS

  def points(self) -> list[dict]:
    return [T.point(pattern=self.pattern, window=self.window, pos_full=self.pos_full,
                    budget=BUDGET, seed=s) for s in self.seeds]


# The statistics a claim may name (experiments/toy_study/small_n.py computes them).
TESTS = {
    "gehan": "tokens to a threshold, censored at the budget (a seed that never gets there "
             "ranks after every seed that does): Gehan's generalised Wilcoxon statistic, "
             "exact permutation test over the two arms' seeds, one-sided",
    "fisher": "seeds that retrieve (final far acc >= RETRIEVES), k/n per arm with "
              "Clopper-Pearson intervals: Fisher's exact test, one-sided",
    "sign_flip": "per-seed differences of arms paired by seed: exact sign-flip test of the "
                 "mean difference, one-sided; interval BCa over seeds",
    "one_sample": "per-seed values against the margin: exact sign-flip test of the mean "
                  "minus the margin, one-sided; interval t over seeds",
    "tost": "equivalence within +-margin: two one-sided t tests, both at ALPHA (the 90% t "
            "interval within +-margin); not reproduced when that interval lies wholly "
            "outside +-margin",
    "permutation": "difference of the arms' means: exact permutation test over seeds, "
                   "one-sided; interval BCa",
    "bootstrap": "a statistic of two unpaired arms, seeds resampled within each arm (2,000 "
                 "draws, fixed seed): percentile interval; p = the share of draws at or "
                 "short of the margin",
}


@dataclasses.dataclass(frozen=True)
class Claim:
  key: str
  role: str               # "primary" (one per finding) or "secondary" (Holm within the finding)
  paper: str              # what the paper says, in one sentence
  stands_for: str         # the paper's metric this toy measure stands in for
  differs: str            # how the toy analogue differs from it
  effect: str             # the measured effect, exactly
  test: str               # a key of TESTS
  arms: tuple             # the arms' labels it compares (or the one it reads)
  margin: float = 0.0
  side: str = "above"     # "above" / "below" the margin, or "within" +-margin
  needs_retrieval: bool = False   # judged only on seeds that retrieve (see RULE)
  delay: bool = False     # a claim of a delay: "never learns" is its own outcome


RULE = (
    "A claim is **reproduced** when its test, in the paper's direction, gives p < 0.05 "
    "(a secondary claim: its Holm-adjusted p over the finding's secondary claims) and the "
    "effect lies on the paper's side of the margin; **not reproduced** when the effect's "
    "interval lies wholly on the other side of the margin; **inconclusive** otherwise. "
    "For a claim of no difference (\"within +-m\") it is reproduced when the two one-sided "
    "tests both give p < 0.05, not reproduced when the 90% interval lies wholly outside "
    "+-m. Two outcomes are named apart: *inconclusive: model does not retrieve* when a claim "
    "about capping, ablating or probing a model has fewer than 3 seeds whose uncapped final "
    f"far accuracy reaches {RETRIEVES} (chance is 1/64; non-retrieving seeds are left out and "
    "counted); *never learns* when a delay claim's slower arm reaches the threshold in no "
    "seed by the budget (a failure to learn, not a delay). A claim whose test cannot fail by "
    "construction is inconclusive with the reason. Each primary claim is tested at 0.05 on "
    "its own (four findings, four primaries, no correction across findings).")


def claims_table(claims) -> list[list[str]]:
  """Rows for a report's rules section (every field, as registered)."""
  side = {"above": "effect > {m:g}", "below": "effect < {m:g}", "within": "|effect| <= {m:g}"}
  return [[c.key, c.role, c.paper, c.effect, side[c.side].format(m=c.margin), c.test,
           ", ".join(c.arms), c.stands_for, c.differs] for c in claims]
