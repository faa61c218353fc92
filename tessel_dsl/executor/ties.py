"""Parameters used by several blocks: a tied embedding and LM head (GPT-2, Qwen2 with
``tie_word_embeddings``), T5's embedding shared by encoder, decoder and head.

Every rank running a block that uses such a parameter holds it, and its backward adds that
block's part of the gradient. Before the optimizer step the parts are summed over the holding
ranks of the pipeline, as Megatron-LM does for the embedding and the head: one all-reduce per set
of holding ranks. A block on several devices runs whole on each of them, so each of its devices
has the block's whole part; the sum must take it once, from one device per block (`count`). When
every holder runs every block using the parameter (an M-shape's E and H on all devices), each
copy already has the whole gradient and nothing is summed.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from torch import nn

from tessel_dsl.errors import ExecutionError


@dataclass(frozen=True)
class Tie:
    """One parameter used by several blocks."""

    names: tuple[str, ...]    # its names under the blocks' submodules, in block order
    blocks: tuple[str, ...]   # the blocks using it, in the spec's order
    ranks: tuple[int, ...]    # the pipeline devices holding it: every device of those blocks
    count: tuple[int, ...]    # the devices whose gradient enters the sum (one per block); () when none is summed


def find_ties(spec, model: nn.Module, order: list[str], blocks: dict[str, list[str]]) -> list[Tie]:
    """Every parameter that the submodules of more than one block hold."""
    modules = dict(model.named_modules(remove_duplicate=False))
    users: dict[int, tuple[list[str], list[str]]] = {}
    for b in order:
        for f in blocks[b]:
            for n, p in modules[f].named_parameters():
                names, bs = users.setdefault(id(p), ([], []))
                names.append(f"{f}.{n}")
                if b not in bs:
                    bs.append(b)
    ties = []
    for names, bs in users.values():
        if len(bs) < 2:
            continue
        devs = {b: set(spec.block(b).devices) for b in bs}
        ranks = sorted(set().union(*devs.values()))
        if all(d == set(ranks) for d in devs.values()):
            count: tuple[int, ...] = ()
        else:
            count = _one_per_block(ranks, devs)
            if count is None:
                where = ", ".join(f"{b} on {sorted(d)}" for b, d in devs.items())
                raise ExecutionError(f"parameter {names[0]} is used by blocks {where}: no set of devices holds "
                                     f"exactly one copy of each block's gradient, so its parts cannot be summed "
                                     f"once each; place the blocks that share it differently")
        ties.append(Tie(tuple(names), tuple(bs), tuple(ranks), count))
    return ties


def _one_per_block(ranks: list[int], devs: dict[str, set[int]]) -> tuple[int, ...] | None:
    """The fewest devices such that every block has exactly one of them."""
    for k in range(1, len(ranks) + 1):
        for pick in combinations(ranks, k):
            if all(len(d & set(pick)) == 1 for d in devs.values()):
                return pick
    return None


def retie(slots: dict[int, list[tuple[nn.Module, str]]], local: set[int]) -> set[int]:
    """Point every slot ``(module, attribute)`` that held one tensor at one tensor again, the
    first one held by a local module (`local`: ids of the modules inside this rank's blocks):
    allocating or moving modules one by one gives each its own copy. Returns the ids of the
    tensors now shared with a local module."""
    kept = set()
    for group in slots.values():
        if len(group) < 2:
            continue
        here = [(m, a) for m, a in group if id(m) in local]
        if not here:
            continue
        keep = _slot(*here[0])
        for m, a in group:
            (m._parameters if a in m._parameters else m._buffers)[a] = keep
        kept.add(id(keep))
    return kept


def _slot(module: nn.Module, attr: str):
    return module._parameters[attr] if attr in module._parameters else module._buffers[attr]
