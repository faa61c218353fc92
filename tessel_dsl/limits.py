"""Size limits shared by the language, plan loading and the tools that run plans.

Every limit is checked before the work it bounds starts, so an oversized input is a clear error
at once rather than minutes of work or a memory blow-up. A spec that passes `tessel check` is
within every limit a plan loader applies (`spec_rules.py` checks this one table for both),
so no search writes a plan that the simulator or the executor then refuses.
"""
from __future__ import annotations

MAX_DEVICES = 4096
MAX_BLOCKS = 100_000
# Micro-batches of one schedule, and block instances (blocks x micro-batches) of one plan.
MAX_MICROBATCHES = 100_000
MAX_INSTANCES = 1_000_000
# Block instances `tessel simulate` takes on: re-extending, lowering, checking and simulating
# 160,000 instances (656,000 actions, M-shape -n 16000) take about 40 s of CPU (`python
# bench/simulate.py --scale`); beyond this a run would take minutes without saying so.
MAX_SIMULATED_INSTANCES = 200_000
# Integer times, memory deltas and start times of a plan: far above any real schedule, low enough
# that sums over a whole plan stay exact in a float and never overflow a conversion. A spec is held
# to the same bound, in its own units, and so is its whole work (every block and transfer of every
# micro-batch, one after another), which bounds the start times of any schedule of it.
MAX_QUANTITY = 2 ** 40
# Block names, and the tensors edges carry (dimensions, and bytes: beyond any device's memory).
MAX_NAME = 200
MAX_TENSOR_DIMS = 16
MAX_TENSOR_BYTES = MAX_QUANTITY * 1024
# Plan files: bigger than any plan within MAX_INSTANCES, small enough to parse in well under 1 GB.
MAX_PLAN_BYTES = 256 * 1024 * 1024

# Spec text. Loops, shape uses and edge groups multiply what a few lines ask for, so their total
# (iterations + uses + edges) has one budget for the whole evaluation, and numbers are bounded
# before any arithmetic. The parser's cost grows faster than linearly with the length of one
# statement, so a statement (one line, or several joined inside brackets) is bounded too.
MAX_EXPANSION = 500_000
MAX_NUMBER = 10 ** 15
# Spec arithmetic is exact (fractions); a value finer than 1 / MAX_DENOMINATOR is refused.
MAX_DENOMINATOR = 10 ** 30
MAX_SPEC_BYTES = 16 * 1024 * 1024
MAX_STATEMENT_CHARS = 64 * 1024
# `include` statements in one spec, all files together (each is read and parsed once).
MAX_INCLUDES = 256
