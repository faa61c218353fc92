"""A block's backward in two passes that share no work: input gradients now, weight gradients later.

The input pass runs autograd from the block's outputs to its inputs only. On the way it keeps the
gradient arriving at every node where a parameter's branch leaves the input path (the matmul
node of a linear layer, a convolution's node): those nodes are run again later for their
parameter outputs alone. The weight pass starts autograd at these kept gradients, so it runs
only the parameter branches and never walks the input path again (`torch.distributed.pipelining`
splits its stages' backward the same way). A linear layer's weight (the right-hand matrix of a
matrix product, or its transpose) skips autograd there too: its gradient is one product of the
kept output gradient and the product's saved input.

Node sets, on the graph below the block's outputs:
* the input path: nodes from which one of the block's inputs can be reached;
* a param group: parameters whose branches meet the input path at a shared set of nodes (the
  junctions). Groups run in separate autograd calls, since one call from a later layer's
  junction to all parameters would walk the input path down to the earlier layers' weights.

A parameter reached from an output without crossing the input path (every parameter, when no
input needs a gradient, as on a first stage) is left to the weight pass whole, from the outputs.

A one-dimensional parameter on the input path (a bias, a norm's scale) gets its gradient in the
input pass instead. Its gradient is a reduction over the rows the input pass has at hand, and some
nodes produce it in the same kernel as the input gradient (a layer norm's backward reads the
input, the gradient and the statistics once for all three outputs); deferring it would run that
node twice and add an autograd call for a few kernels. The weight pass is then the weight
matmuls alone, which is what a zero-bubble schedule moves around.
"""
from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass, field

import torch
from torch.autograd.graph import GradientEdge, Node


def grad_node(t: torch.Tensor) -> Node | None:
    """`t`'s autograd node; for a leaf, its gradient accumulator (made on demand by a view)."""
    if t.grad_fn is not None:
        return t.grad_fn
    if not t.requires_grad:
        return None
    return t.view_as(t).grad_fn.next_functions[0][0]


def _consumers(roots: list[Node]) -> dict[Node, list[Node]]:
    """For every node below `roots`: the nodes whose gradient flows into it."""
    up: dict[Node, list[Node]] = defaultdict(list)
    seen = set(roots)
    todo = deque(roots)
    while todo:
        node = todo.popleft()
        for nxt, _ in node.next_functions:
            if nxt is None:
                continue
            up[nxt].append(node)
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return up


def _above(starts, up: dict[Node, list[Node]], stop: set[Node]) -> tuple[set[Node], set[Node]]:
    """Nodes reached from `starts` walking towards the outputs, not past `stop`; and the `stop`
    nodes met."""
    seen, met = set(starts), set()
    todo = deque(starts)
    while todo:
        for node in up.get(todo.popleft(), ()):
            if node in stop:
                met.add(node)
            elif node not in seen:
                seen.add(node)
                todo.append(node)
    return seen, met


@dataclass
class _Group:
    params: list[torch.Tensor]
    junctions: list[Node]
    grads: dict[Node, tuple] = field(default_factory=dict)
    direct: tuple[str, bool] | None = None  # see `_matmul_weight`


# A matrix product's backward node: which of its inputs is the right-hand matrix, and the name of
# the saved left-hand one.
_MATMULS = {"MmBackward0": (1, "_saved_self"), "AddmmBackward0": (2, "_saved_mat1")}


def _matmul_weight(params: list[torch.Tensor], junctions: list[Node], acc: Node) -> tuple[str, bool] | None:
    """How to compute a lone plain weight's gradient straight from its junction, when the junction
    is a matrix product whose right-hand matrix is the weight or its transpose (a linear layer):
    (the saved left-hand matrix's attribute, whether transposed). Else None, and the weight pass
    runs autograd from the junction."""
    if len(params) != 1 or len(junctions) != 1 or type(params[0]) not in (torch.Tensor, torch.nn.Parameter):
        return None
    j = junctions[0]
    how = _MATMULS.get(j.name())
    if how is None:
        return None
    idx, saved = how
    child = j.next_functions[idx][0]
    if child is acc:
        return saved, False
    if child is not None and child.name() == "TBackward0" and child.next_functions[0][0] is acc:
        return saved, True
    return None


@dataclass
class WeightGrad:
    """The weight pass of one block's backward, kept from its input pass; `run()` once."""

    groups: list[_Group]
    rest: list[torch.Tensor]          # parameters not reached through the input path
    outs: list[torch.Tensor]
    grads: list[torch.Tensor]

    def run(self) -> None:
        for g in self.groups:
            if g.direct is not None:
                self._matmul(g)
                continue
            edges, seeds = [], []
            for node in g.junctions:
                for i, gr in enumerate(g.grads.get(node, ())):
                    if gr is not None:
                        edges.append(GradientEdge(node, i))
                        seeds.append(gr)
            if not edges:
                continue
            # A junction below another junction of the same group (a weight used twice) would
            # also get the gradient that flows down the input path from the upper one; the
            # input pass already counted that, so it gets its kept gradient instead.
            hooks = [n.register_prehook(lambda _g, kept=g.grads[n]: kept)
                     for n in g.junctions if n in g.grads] if len(g.junctions) > 1 else []
            try:
                _accumulate(g.params, torch.autograd.grad(edges, g.params, seeds, allow_unused=True))
            finally:
                for h in hooks:
                    h.remove()
        if self.rest and self.outs:
            _accumulate(self.rest, torch.autograd.grad(self.outs, self.rest, self.grads, allow_unused=True))
        self.groups, self.outs, self.grads = [], [], []

    @staticmethod
    def _matmul(g: _Group) -> None:
        """A linear layer's weight gradient as its matrix product's backward would compute it (one
        product of the kept output gradient and the saved input), without an autograd call: the
        engine's start per call, over a walk of the graph below the junction, costs the host more
        than the product takes on a GPU for small layers."""
        (node,) = g.junctions
        kept = g.grads.get(node, ())
        grad = kept[0] if kept else None
        if grad is None:
            return
        saved, transposed = g.direct
        # No graph: the saved input is part of the forward's graph, and a product recorded on it
        # would keep that whole graph alive from `.grad`.
        with torch.no_grad():
            left = getattr(node, saved)
            # out = left @ right: d right = left^T @ grad; for right = W^T, dW = grad^T @ left.
            gw = grad.t().mm(left) if transposed else left.t().mm(grad)
            alpha = getattr(node, "_saved_alpha", 1)
            _accumulate(g.params, [gw if alpha == 1 else gw * alpha])


def _accumulate(params: list[torch.Tensor], grads) -> None:
    for p, g in zip(params, grads):
        if g is None:
            continue
        if p.grad is None:
            p.grad = g
        else:
            p.grad += g


@dataclass
class Split:
    """Which parameter gradients each pass computes, read off one micro-batch's graph.

    Made right after the forward (`prepare`), while the device still runs the forward's kernels,
    so the walk over the graph costs the input pass nothing on the device's critical path."""

    outs: list[int]                   # ids of the outputs it was read from
    need: list[torch.Tensor]          # inputs that get a gradient
    early: list[torch.Tensor]         # one-dimensional parameters on the input path
    groups: list[tuple[list[torch.Tensor], list[Node], tuple[str, bool] | None]]  # (params, junctions, direct)
    rest: list[torch.Tensor]          # parameters the weight pass computes from the outputs


def prepare(outs: list[torch.Tensor], inputs: list[torch.Tensor], params: list[torch.Tensor]) -> Split:
    """The split of one micro-batch's backward from `outs` to `inputs` and `params`."""
    need = [t for t in inputs if t.requires_grad]
    params = [p for p in params if p.requires_grad]
    roots = [n for n in (grad_node(o) for o in outs) if n is not None]
    ids = [id(o) for o in outs]
    if not need or not roots:
        return Split(ids, need, [], [], params)
    up = _consumers(roots)
    path, _ = _above([grad_node(t) for t in need], up, set())
    groups: dict[Node, _Group] = {}
    rest: list[torch.Tensor] = []
    early: list[torch.Tensor] = []
    acc: dict[int, Node] = {}
    for p in params:
        node = acc[id(p)] = grad_node(p)
        branch, met = _above([node], up, path)
        if not met:
            if node in up:
                rest.append(p)
            continue
        if any(r in branch and r not in path for r in roots):
            rest.append(p)  # also fed by an output directly: the weight pass runs it whole
            continue
        if p.dim() <= 1:
            early.append(p)
            continue
        found = {id(g): g for m in met if (g := groups.get(m)) is not None}
        group = _Group([p], sorted(met, key=id))
        for g in found.values():  # junctions shared with earlier groups: one group
            group.params += g.params
            group.junctions = sorted(set(group.junctions) | set(g.junctions), key=id)
        for m in group.junctions:
            groups[m] = group
    unique = list({id(g): g for g in groups.values()}.values())
    return Split(ids, need, early, [(g.params, g.junctions, _matmul_weight(g.params, g.junctions, acc[id(g.params[0])]))
                                    for g in unique], rest)


def backward_input(outs: list[torch.Tensor], grads: list[torch.Tensor], inputs: list[torch.Tensor],
                   params: list[torch.Tensor], split: Split | None = None) -> tuple[list[torch.Tensor | None], WeightGrad]:
    """Gradients of `inputs` (None where unused) from `outs` seeded with `grads`, and the pending
    weight pass for `params`; `split` is `prepare`'s for the same outputs, or made here."""
    if split is None or split.outs != [id(o) for o in outs]:
        split = prepare(outs, inputs, params)
    need, early, rest = split.need, split.early, split.rest
    if not need or not any(grad_node(o) is not None for o in outs):
        return [None] * len(inputs), WeightGrad([], rest, list(outs), list(grads))
    unique = [_Group(list(ps), list(js), direct=how) for ps, js, how in split.groups]
    # The gradient arriving at each junction is kept by asking autograd for it as one more result
    # (a GradientEdge per output of the junction's forward): the engine captures it in C++ on its
    # way, where a Python hook would take the interpreter lock once per junction in a pass that is
    # often bound by the host.
    kept = [(g, node, k) for g in unique for node in g.junctions for k in range(len(node._input_metadata))]
    got = torch.autograd.grad(outs, need + early + [GradientEdge(n, k) for _, n, k in kept], grads,
                              retain_graph=True, allow_unused=True)
    at = len(need) + len(early)
    for g, node, _k in kept:
        g.grads[node] = g.grads.get(node, ()) + (got[at],)
        at += 1
    _accumulate(early, got[len(need):len(need) + len(early)])
    by_id = {id(t): g for t, g in zip(need, got[:len(need)])}
    keep = bool(rest)
    return [by_id.get(id(t)) for t in inputs], WeightGrad(unique, rest, list(outs) if keep else [],
                                                          list(grads) if keep else [])
