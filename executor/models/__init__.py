"""Models that ship with the executor, each split into the blocks of one of the paper's placements.

| module | placement | blocks |
|---|---|---|
| `executor.models.chain` | V | F0 -> ... -> Fk |
| `executor.models.gpt` | M (or V) | E(all) -> F0 -> ... -> Fk [-> H(all)] |
| `executor.models.encdec` | NN | E1(all) -> encoder stages -> E2(all) -> decoder stages |
| `executor.models.branches` | K | two chains of stages -> J(all) |

Each module has `factory(ctx, **sizes)` for the executor and `reference(spec, **sizes)` for the
single-process model with the same weights and micro-batches.
"""
