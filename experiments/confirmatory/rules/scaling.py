"""Finding 1 (scaling): the efficient-attention design changes how fast long-context ability
emerges; different hybrids converge to similar long-context performance.

Comparison fixed in advance (no pick of the slowest and fastest arm): the SWA hybrid with
the small window against the Lightning hybrid, the two designs the exploratory study saw
far apart (SF w=4 at 2.05M tokens, LF beyond its 5.91M budget in 2 of 3 seeds)."""

from experiments.confirmatory.arms import LF, SF4
from experiments.confirmatory.protocol import BEYOND, READ_AT, THRESHOLD, Claim

METRICS = [
    ("far acc by distance", f"kv_recall accuracy at T = 64 on the distance bins d >= {BEYOND} "
     "(every depth pooled), evaluated every 100 steps on the same 32 examples a cell"),
    ("tokens to emerge", f"training tokens at the first evaluation with far acc by distance "
     f">= {THRESHOLD}; '> budget' (censored) when none"),
    ("learns", f"seeds whose far acc by distance reaches {THRESHOLD} by the budget, k/n with "
     "a Clopper-Pearson interval"),
    ("gap at budget b", "mean far acc by distance of SF w=4 minus LF's, at the evaluation "
     f"nearest b N tokens, b in {READ_AT}"),
    ("far acc, fact at offset 0", "the same, on kv_recall_start (the fact first; distance "
     "without the position confound)"),
]

PRIMARY = Claim(
    "emergence speed", "primary", "the design changes how fast long-context ability emerges",
    stands_for="the paper's early-training gap in log(LongPPL) and RULER between mixers",
    differs="a synthetic key-value recall at T = 64 at toy-xs, not natural-text perplexity "
            "at 16K; speed is tokens to a fixed accuracy, not a curve's area",
    effect="tokens to emerge, LF against SF w=4 (Gehan statistic; ratio of medians printed)",
    test="gehan", arms=(SF4.label, LF.label), margin=0.0, side="above", delay=True)

SECONDARY = (
    Claim("convergence at 30 N", "secondary",
          "with more training the hybrids converge to similar long-context performance",
          stands_for="the paper's converging log(LongPPL) at 100-1000 N",
          differs="read at 30 N, the toy's budget, not at 1000 N",
          effect=f"gap at budget {READ_AT[-1]:g} N (SF w=4 minus LF)", test="tost",
          arms=(SF4.label, LF.label), margin=0.1, side="within"),
    Claim("gap shrinks", "secondary", "the gap between designs shrinks with training",
          stands_for="the paper's converging log(LongPPL)",
          differs="a difference of two reads of one toy curve",
          effect=f"|gap| at {READ_AT[0]:g} N minus |gap| at {READ_AT[-1]:g} N (absolute: "
                 "either arm may lead)", test="bootstrap", arms=(SF4.label, LF.label),
          margin=0.0, side="above"),
    Claim("emergence speed, fact at offset 0", "secondary",
          "the design changes how fast long-context ability emerges",
          stands_for="as emergence speed", differs="as emergence speed, with the fact at offset 0",
          effect="as emergence speed, on kv_recall_start", test="gehan",
          arms=(SF4.label, LF.label), margin=0.0, side="above", delay=True),
)

EXPLORATORY = ("the fit of L(N, D) (its sizes and budgets are not retrained; judged with "
               "fit-scaling's own bootstrap interval, exploratory)",
               "the nine-architecture speed table of seeds 0-2")
