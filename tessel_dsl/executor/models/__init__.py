"""Models that ship with the executor, each split into the blocks of one of the paper's placements.

| module | placement | blocks |
|---|---|---|
| `tessel_dsl.executor.models.chain` | V | F0 -> ... -> Fk |
| `tessel_dsl.executor.models.gpt` | M (or V) | E(all) -> F0 -> ... -> Fk [-> H(all)] |
| `tessel_dsl.executor.models.encdec` | NN (or V) | E1(all) -> encoder stages -> E2(all) -> decoder stages |
| `tessel_dsl.executor.models.branches` | K (or V) | two chains of stages -> J(all) |

On a V chain each model runs as the conventional split: its layers in order, evenly over the
stages, the first stage embedding and the last one computing the head (the 1F1B baseline).

Each module has `factory(ctx, **sizes)` for the executor and `reference(spec, **sizes)` for the
single-process model with the same weights and micro-batches.
"""
