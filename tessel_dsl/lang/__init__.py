"""The `.tsl` language: text -> syntax tree -> evaluated values -> checked IR `Spec`.

parser     grammar (tessel_dsl/grammar/tessel.lark) and the entry points `parse`, `parse_file`
plain_lines  plain block lines, read into the syntax tree without the parser (for speed)
syntax     the syntax tree's node types;  tree: lark tree -> syntax tree
values     expressions, quantities and name templates;  blocks: block declarations and chains
context    what blocks and memory lines need from the evaluator;  memory: `memory ... on DEVICES`
evaluate   the statement evaluator (loops, shapes, includes, header lines, expectations)
derive     mirrored backward blocks (`derive backward`) and the inference projection
spec_check semantic checks of a `Spec` (also for specs built in Python)
"""
