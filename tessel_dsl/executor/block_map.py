"""The user's block -> submodule mapping for `Pipeline`: read from a file and checked against the
spec and the model before anything is built, so a wrong mapping fails early with a plain message."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from torch import nn

from tessel_dsl.errors import ExecutionError
from tessel_dsl.executor.model_api import forward_preds, forward_succs


def read_blocks(path: str | os.PathLike) -> dict[str, list[str]]:
    """A block -> submodule names mapping from a JSON file; errors name file:line:col."""
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ExecutionError(f"{path}: cannot read the block mapping ({e.strerror or e})") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise ExecutionError(f"{path}:{e.lineno}:{e.colno}: {e.msg}") from None
    if not isinstance(doc, dict) or not all(
            isinstance(k, str) and isinstance(v, list) and all(isinstance(f, str) for f in v) for k, v in doc.items()):
        raise ExecutionError(f"{path}: expected an object of block name -> list of submodule names, "
                             f'such as {{"F0": ["layers.0", "layers.1"]}}')
    return doc


def forward_graph(spec) -> dict[str, tuple[str, ...]]:
    """Every forward block's input blocks (spec edge order), in dependency order. Chains, joins
    and fan-outs bind by name; a placement must end in one block, which computes the loss."""
    fwd = [n for n in spec.topo_order if not spec.block(n).kind.is_backward]
    ends = [n for n in fwd if not forward_succs(spec, n)]
    if len(ends) != 1:
        raise ExecutionError(f"blocks bound by name must end in one forward block, which computes the loss or "
                             f"the output; spec {spec.name!r} has {len(ends)} ({ends}), as independent pipelines "
                             f"sharing the devices do (use a model factory: `tessel run --model MODULE:FACTORY`, "
                             f"docs/run.md)")
    return {n: forward_preds(spec, n) for n in fwd}


def check_blocks(spec, model: nn.Module, order: list[str], blocks: dict[str, list[str]]) -> None:
    """Every forward block mapped, every name a submodule, every parameter in exactly one block."""
    unknown = sorted(set(blocks) - set(order))
    if unknown:
        raise ExecutionError(f"blocks {unknown} are not forward blocks of spec {spec.name!r} ({order})")
    missing = [b for b in order if not blocks.get(b)]
    if missing:
        raise ExecutionError(f"no submodules given for forward block(s) {missing}")
    modules = dict(model.named_modules())
    owner: dict[str, str] = {}
    for b in order:
        for f in blocks[b]:
            if f not in modules or f == "":
                close = sorted(n for n in modules if n and (n.split(".")[-1] == f.split(".")[-1]))[:3]
                hint = f" (did you mean {', '.join(close)}?)" if close else ""
                raise ExecutionError(f"block {b!r}: the model has no submodule {f!r}{hint}")
            if f in owner:
                raise ExecutionError(f"submodule {f!r} is in both {owner[f]!r} and {b!r}")
            owner[f] = b
    for f in owner:
        for g in owner:
            if f != g and g.startswith(f + "."):
                raise ExecutionError(f"{g!r} ({owner[g]}) lies inside {f!r} ({owner[f]})")
    holder: dict[int, str] = {}
    for f, b in owner.items():
        for n, p in modules[f].named_parameters():
            if holder.get(id(p), b) != b:
                raise ExecutionError(f"parameter {f}.{n} is shared by blocks {holder[id(p)]!r} and {b!r}; "
                                     f"tied weights across blocks are not supported")
            holder[id(p)] = b
    loose = [n for n, p in model.named_parameters() if id(p) not in holder]
    if loose:
        raise ExecutionError(f"parameters outside every block: {loose[:5]}{' ...' if len(loose) > 5 else ''}")


def check_tp(spec, blocks: dict[str, list[str]], tp: dict[str, dict[str, Any]]) -> None:
    """Tensor-parallel plans only for multi-device blocks (on all the plan's devices or on some),
    and only over submodules of the block."""
    for b, plan in tp.items():
        if b not in blocks:
            raise ExecutionError(f"tensor-parallel plan for {b!r}, which is no forward block")
        devs = spec.block(b).devices
        if len(devs) < 2:
            raise ExecutionError(f"tensor-parallel plan for {b!r}, which runs on one device ({devs[0]}): "
                                 f"only blocks on several devices can be sharded")
        for f in plan:
            if not any(f == m or f.startswith(m + ".") for m in blocks[b]):
                raise ExecutionError(f"tensor-parallel plan for {b!r} names {f!r}, which is not in the block")
