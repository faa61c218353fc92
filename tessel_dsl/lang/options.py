"""The block options (`time T`, `memory M`, `grad NAME`, ...): one table that the grammar, the syntax
tree, the evaluator, `check()` and the `.tsl` writer all read.

A row says how the option is written, how its value is read, where it lands (a field of the IR's
`Block`, or the forward-only notes in `ForwardOptions` that derive and the inference projection
use) and, for an IR field, what a sound value is. The grammar's `block_opt` alternatives are written
from the rows (`grammar_block_options`). Adding an option is a row here and, for an IR option, the
`Block` field, then `python -m tessel_dsl.lang.grammar_tables` (docs/architecture.md has the recipe).
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class BlockOption:
    """One block option."""

    words: str  # as written before the value; the grammar's rule is `opt_` + words with `_`
    value: str  # how the value is read: "time", "memory", "integer", "name" or "grad time"
    field: str  # the attribute it sets
    on: str = "block"  # "block": a field of ir.Block; "forward": a ForwardOptions attribute
    forward_only: bool = False
    required: bool = False  # a block without it is an error (`missing-<words>`)
    metavar: str = "V"  # the value's placeholder in messages: `time T`
    default: Any = None  # the value when the option is not written
    # For an IR field: what is wrong with a value (None when sound), for check() on any Spec,
    # reported under `check_code`.
    check: Callable[[Any], str | None] | None = None
    check_code: str = "bad-value"
    always_written: bool = False  # the .tsl writer writes it even at its default
    # What a user reads about it: the README's list of block options is written from these
    # (`python bench/doc_tables.py --write`).
    doc: str = ""

    @property
    def rule(self) -> str:
        return "opt_" + self.words.replace(" ", "_")

    @property
    def grammar(self) -> str:
        """Its alternative of the grammar's `block_opt` rule: the words, then the value."""
        words = " ".join(f'"{w}"' for w in self.words.split())
        return f"{words} {'NAME' if self.value == 'name' else 'quantity'}"

    @property
    def missing_code(self) -> str:
        return "missing-" + self.words.replace(" ", "-")

    def codes(self) -> set[str]:
        """The diagnostic codes this option can raise beyond the evaluator's own."""
        return ({self.missing_code} if self.required else set()) | ({self.check_code} if self.check else set())


def _positive_time(value: Any) -> str | None:
    return f"takes time {value}; every block needs a positive time" if value <= 0 else None


OPTIONS: tuple[BlockOption, ...] = (
    BlockOption("time", "time", "time", required=True, metavar="T", check=_positive_time,
                check_code="non-positive-time",
                doc="is a whole number of time units ≥ 1, or a time with a unit (see *Units*). Every block has one."),
    BlockOption("memory", "memory", "memory", metavar="M", default=0, always_written=True,
                doc="is the block's memory delta on each of its devices: positive for what a forward keeps "
                    "for its backward, negative for what a backward frees. Default 0."),
    BlockOption("grad", "name", "grad_name", on="forward", forward_only=True, metavar="NAME",
                doc="(forward blocks, for derivation) names the derived backward block."),
    BlockOption("grad time", "grad time", "grad_time", on="forward", forward_only=True, metavar="T",
                doc="(forward blocks, for derivation) is the derived backward's time: a time, or a ratio of "
                    "the forward's (`grad time 1x`)."),
    BlockOption("infer memory", "memory", "infer_memory", on="forward", forward_only=True, metavar="M", default=0,
                doc="(forward blocks) is the block's memory in inference. Default 0."),
)

BY_WORDS: dict[str, BlockOption] = {o.words: o for o in OPTIONS}
BY_RULE: dict[str, BlockOption] = {o.rule: o for o in OPTIONS}


def grammar_block_options() -> str:
    """The grammar's `block_opt` rule, one aliased alternative per row."""
    return "?block_opt: " + "\n          | ".join(f"{o.grammar:<29}-> {o.rule}" for o in OPTIONS)


# The options that are fields of ir.Block, in the order they are written.
BLOCK_FIELDS: tuple[BlockOption, ...] = tuple(o for o in OPTIONS if o.on == "block")
