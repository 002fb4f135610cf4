"""The confirmatory set's arms: every model it trains, 7 fresh seeds each (protocol.SEEDS).
Four arms, so the whole set trains in about 76 minutes on 2 cores (exploratory timings:
~300-350 s a run on one core); the rule files pick their comparisons from these."""

from experiments.confirmatory.protocol import Arm

SF4 = Arm("SF w=4", "SF", "small")
SF32 = Arm("SF w=32", "SF", "large")
SF4_NOPE = Arm("SF w=4, NoPE-full", "SF", "small", pos_full="nope")
LF = Arm("LF", "LF")

ARMS = (SF4, SF32, SF4_NOPE, LF)
