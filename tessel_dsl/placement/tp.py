"""DTensor plans for the blocks a plan spreads over several devices (the M-shape's E and H), so
that `Pipeline` shards them as the candidate's costs assumed instead of running them whole on
each device: embeddings by vocabulary rows (`VocabShardedEmbedding`, which builds only its own
rows' weight gradient), the head column-wise with the logits left sharded for `loss_parallel`.
Other submodules of such a block (the final norm, a positional embedding) stay replicated."""
from __future__ import annotations

from torch import nn

from tessel_dsl.executor.models.common import VocabShardedEmbedding


class SpreadEmbedding(VocabShardedEmbedding):
    """`VocabShardedEmbedding` as `Pipeline` swaps it in for a spread block's `nn.Embedding`. Its
    weight keeps the embedding's name (``<module>.weight``); `Pipeline`'s fake run, which sees the
    model as one process with plain full-size parameters, gets the plain lookup."""

    def forward(self, tokens):
        from torch.distributed.tensor import DTensor

        if not isinstance(self.weight, DTensor):  # the one-process fake run: a plain full table
            return nn.functional.embedding(tokens, self.weight)
        return super().forward(tokens)


def spread_embedding(embed: nn.Embedding, mesh) -> nn.Module:
    """A `tp=` entry that replaces `embed` with its vocabulary-row shards over `mesh`."""
    return SpreadEmbedding(embed, mesh)


def _plain(m: nn.Embedding) -> bool:
    # The sharded lookup is F.embedding without options: one with a padding row, max_norm,
    # frequency scaling or sparse gradients keeps DTensor's row-wise plan.
    return m.padding_idx is None and m.max_norm is None and not m.scale_grad_by_freq and not m.sparse


def tp_plans(plan, blocks: dict[str, list[str]], model: nn.Module) -> dict[str, dict]:
    """``tp=`` for `Pipeline(plan, model, loss_fn, blocks=blocks, tp=...)`; empty when no block
    is on several devices. `plan` is a Plan or a plan file."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel

    if not hasattr(plan, "spec"):
        from tessel_dsl.plan import load_plan

        plan = load_plan(plan)
    spec = plan.spec
    out: dict[str, dict] = {}
    for b, mods in blocks.items():
        if len(spec.block(b).devices) < 2:
            continue
        styles = {}
        # The vocabulary's embedding is sharded; a smaller one beside it (positions) stays whole on
        # every device: sharding it would cost the block a second all-reduce for a lookup of a few
        # rows, which the candidate's costs do not hold.
        rows = max((m.num_embeddings for f in mods if isinstance(m := model.get_submodule(f), nn.Embedding)), default=0)
        for f in mods:
            m = model.get_submodule(f)
            if isinstance(m, nn.Embedding) and m.num_embeddings == rows:
                styles[f] = spread_embedding if _plain(m) else RowwiseParallel(input_layouts=Replicate())
            elif isinstance(m, nn.Linear) and f == mods[-1]:
                styles[f] = ColwiseParallel(output_layouts=Shard(-1), use_local_output=False)
        if styles:
            _check_untied(model, b, list(styles), [f for other, fs in blocks.items() for f in fs
                                                   if other != b or f not in styles])
            out[b] = styles
    return out


def _check_untied(model: nn.Module, block: str, sharded: list[str], others: list[str]) -> None:
    """Sharding a module gives its parameters a layout of their own: refuse one that another
    module shares (a tied embedding and head)."""
    from tessel_dsl.errors import TesselError

    mine = {id(p): f"{f}.{n}" for f in sharded for n, p in model.get_submodule(f).named_parameters()}
    for f in others:
        for n, p in model.get_submodule(f).named_parameters():
            if id(p) in mine:
                raise TesselError(f"block {block} would shard {mine[id(p)]}, which {f}.{n} shares (tied weights): "
                                  f"untie them (e.g. config.tie_word_embeddings=False) or keep {block} unsharded")
