"""The split backward (executor/split_backward.py): input pass then weight pass.

Reference: one ordinary `torch.autograd.backward` over the same graph, in float64. The split must
give the same input and parameter gradients, and its weight pass must not run the input path
again: every autograd node is watched with a pre-hook. With linear layers alone the weight pass
runs no node (each weight's gradient is one product of kept tensors); with other weights
(convolutions) the nodes that run in both passes must be only the junctions where a parameter's
branch leaves the input path, never an activation's or a residual add's node.
"""
from __future__ import annotations

from collections import deque

import pytest
import torch
from torch import nn

from tessel_dsl.executor.models.common import ResidualMLP, TransformerLayer
from tessel_dsl.executor.split_backward import backward_input

torch.manual_seed(0)


def _nodes(outs):
    seen, todo = set(), deque(o.grad_fn for o in outs if o.grad_fn is not None)
    while todo:
        n = todo.popleft()
        if n in seen:
            continue
        seen.add(n)
        todo.extend(f for f, _ in n.next_functions if f is not None)
    return seen


class Watch:
    """Names the nodes that run while `phase` is set."""

    def __init__(self, outs):
        self.ran: dict[str, list] = {"I": [], "W": []}
        self.phase = None
        self.handles = [n.register_prehook(self._hook(n)) for n in _nodes(outs)]

    def _hook(self, node):
        def hook(_grads):
            if self.phase:
                self.ran[self.phase].append(node)
        return hook

    def close(self):
        for h in self.handles:
            h.remove()


def _reference(make, x, seed_grad):
    model = make()
    inp = x.clone().requires_grad_(True)
    out = model(inp)
    out.backward(seed_grad)
    return inp.grad, {k: p.grad for k, p in model.named_parameters()}


def _split(make, x, seed_grad, watch=True):
    model = make()
    inp = x.clone().requires_grad_(True)
    out = model(inp)
    w = Watch([out]) if watch else None
    if w:
        w.phase = "I"
    (gin,), pending = backward_input([out], [seed_grad], [inp], list(model.parameters()))
    after_input = {k: None if p.grad is None else p.grad.clone() for k, p in model.named_parameters()}
    if w:
        w.phase = "W"
    pending.run()
    if w:
        w.close()
    return gin, {k: p.grad for k, p in model.named_parameters()}, model, w, after_input


def _chain():
    torch.manual_seed(1)
    return nn.Sequential(*(ResidualMLP(8, torch.tanh, dtype=torch.float64) for _ in range(3)))


def _gpt_layer():
    torch.manual_seed(2)
    return nn.Sequential(*(TransformerLayer(16, 4, causal=True, dtype=torch.float64) for _ in range(2)))


def _llama():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(hidden_size=16, intermediate_size=32, num_attention_heads=4, num_key_value_heads=2,
                                   num_hidden_layers=2, vocab_size=11, max_position_embeddings=16)
    torch.manual_seed(3)
    model = transformers.LlamaModel(cfg).to(torch.float64)

    class Body(nn.Module):  # the layers and final norm, fed embeddings (as a pipeline stage is)
        def __init__(self):
            super().__init__()
            self.m = model

        def forward(self, h):
            return self.m(inputs_embeds=h).last_hidden_state

    return Body()


def _conv():
    """Convolutions: their weight gradients come from autograd on the kept gradients, not from the
    linear layers' direct product."""
    torch.manual_seed(5)

    class Convs(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Conv1d(4, 4, 3, padding=1, dtype=torch.float64), nn.Conv1d(4, 4, 3, padding=1, dtype=torch.float64)

        def forward(self, x):
            return self.b(torch.tanh(self.a(x))) + x

    return Convs()


CASES = {"chain": (_chain, (4, 8)), "gpt_layers": (_gpt_layer, (2, 5, 16)), "llama": (_llama, (2, 5, 16)),
         "conv": (_conv, (2, 4, 6))}


@pytest.mark.parametrize("case", list(CASES))
def test_split_equals_whole_backward_and_weight_pass_skips_input_path(case):
    make, shape = CASES[case]
    x = torch.randn(shape, dtype=torch.float64)
    g = torch.randn(shape, dtype=torch.float64)
    ref_in, ref_params = _reference(make, x, g)
    gin, params, model, watch, after_input = _split(make, x, g)
    torch.testing.assert_close(gin, ref_in, rtol=1e-12, atol=1e-12)
    assert params.keys() == ref_params.keys()
    shapes = dict(model.named_parameters())
    for k in params:
        if ref_params[k] is None:  # unused here (Llama's token embedding, fed embeddings)
            assert params[k] is None, k
            continue
        torch.testing.assert_close(params[k], ref_params[k], rtol=1e-12, atol=1e-12, msg=k)
        # Weight matrices wait for the weight pass; biases and norm scales are done in the input
        # pass, whole (the weight pass must not add to them again).
        if shapes[k].dim() >= 2:
            assert after_input[k] is None, f"{k}: the input pass computed a weight matrix's gradient"
        else:
            torch.testing.assert_close(after_input[k], ref_params[k], rtol=1e-12, atol=1e-12, msg=k)

    ran_w = set(watch.ran["W"])
    if case != "conv":
        # Linear layers only: each weight's gradient is one product of its kept output gradient and
        # its saved input, so the weight pass runs no autograd node at all.
        assert not ran_w, sorted(n.name() for n in ran_w)
        return
    both = set(watch.ran["I"]) & ran_w
    matrices = [m for m in model.modules() if any(p.dim() >= 2 for p in m.parameters(recurse=False))]
    assert 0 < len(both) <= len(matrices), sorted(n.name() for n in both)
    # Each node run twice is a junction: one of its branches, towards a weight, did not run in the
    # input pass. An activation's or a residual add's node has none, so it never runs again; the
    # weight pass runs nothing but junctions and the weights' own branches.
    ran_i = set(watch.ran["I"])
    for n in both:
        assert any(f is not None and f not in ran_i and _reaches_matrix(f) for f, _ in n.next_functions), n.name()
    assert ran_w - both <= {f for n in both for f, _ in n.next_functions if f is not None and f not in ran_i}
    assert len(ran_i) > len(both)


def _reaches_matrix(node) -> bool:
    """Whether a parameter of two or more dimensions lies below `node`."""
    seen, todo = set(), deque([node])
    while todo:
        n = todo.popleft()
        if n in seen:
            continue
        seen.add(n)
        var = getattr(n, "variable", None)
        if var is not None and var.dim() >= 2:
            return True
        todo.extend(f for f, _ in n.next_functions if f is not None)
    return False


def test_no_input_gradient_runs_the_whole_backward_in_the_weight_pass():
    """A first stage: nothing to send back, so the input pass is empty and the weight pass
    computes every parameter gradient."""
    model = _chain()
    x = torch.randn(4, 8, dtype=torch.float64)
    g = torch.randn(4, 8, dtype=torch.float64)
    out = model(x)
    (gin,), pending = backward_input([out], [g], [x], list(model.parameters()))
    assert gin is None and all(p.grad is None for p in model.parameters())
    pending.run()
    ref = _chain()
    ref(x).backward(g)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-12, atol=1e-12)


def test_weight_used_twice_and_output_fed_by_a_parameter():
    """A weight applied in two places (its junctions lie one below the other on the input path)
    and a parameter that also reaches the output without crossing the input path."""
    torch.manual_seed(4)
    lin = nn.Linear(6, 6, dtype=torch.float64)
    bias = nn.Parameter(torch.randn(6, dtype=torch.float64))

    def run(x):
        return torch.tanh(lin(torch.tanh(lin(x)))) + bias * bias.sum()

    x = torch.randn(3, 6, dtype=torch.float64)
    g = torch.randn(3, 6, dtype=torch.float64)
    inp = x.clone().requires_grad_(True)
    run(inp).backward(g)
    ref = (inp.grad, lin.weight.grad.clone(), lin.bias.grad.clone(), bias.grad.clone())
    for p in (lin.weight, lin.bias, bias):
        p.grad = None
    inp = x.clone().requires_grad_(True)
    (gin,), pending = backward_input([run(inp)], [g], [inp], [lin.weight, lin.bias, bias])
    pending.run()
    for a, b in zip((gin, lin.weight.grad, lin.bias.grad, bias.grad), ref):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


def test_the_weight_pass_leaves_no_graph_behind():
    """Once both passes ran and the outputs are dropped, every tensor the forward saved for its
    backward is freed (a weight gradient recorded on the graph would hold all of it from `.grad`:
    on a GPU, every micro-batch's activations until the step ends)."""
    alive = [0]

    class Box:
        def __init__(self, t):
            self.t = t.detach()
            alive[0] += 1

        def __del__(self):
            alive[0] -= 1

    for make, shape in (CASES["chain"], CASES["gpt_layers"]):
        model = make()
        x = torch.randn(shape, dtype=torch.float64, requires_grad=True)
        with torch.autograd.graph.saved_tensors_hooks(Box, lambda b: b.t):
            out = model(x)
        assert alive[0] > 0
        _, pending = backward_input([out], [torch.ones_like(out)], [x], list(model.parameters()))
        del out
        pending.run()
        del pending
        assert alive[0] == 0
        assert all(p.grad is not None and p.grad.grad_fn is None for p in model.parameters())
