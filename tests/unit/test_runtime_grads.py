"""The executor's gradient seeding (`RankRunner._output_grads`, `_backward`), run in-process.

A one-device spec needs no process group: `RankRunner.step` runs the whole program (forwards,
then backward blocks in the plan's order) on plain autograd islands. Its parameter gradients
must equal those of one ordinary autograd pass over the mean loss of the N micro-batches, which
checks what each backward block is seeded with: 1/N at the loss, the sum over consumers for a
tensor two blocks read, and the input-gradient then weight-gradient split.

The model: X reads two data tensors and outputs a float, an integer and a second float tensor;
M (a forward-only sink with no backward, first among X's consumers), A and B read them (a
fan-out); S has no parameters; L reads S, B and X and returns the loss and a second float output
that nothing reads (it gets no gradient).
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from tessel_dsl.executor.model_api import TensorMeta
from tessel_dsl.executor.runtime import RankRunner
from tessel_dsl.ir import Block, Edge, Kind, Mode, Spec
from tessel_dsl.lower import lower
from tessel_dsl.plan import Plan
from tessel_dsl.search.baselines import build

H = 3
FORWARDS = {"X": (), "M": ("X",), "A": ("X",), "S": ("A",), "B": ("X",), "L": ("S", "B", "X")}
NO_BACKWARD = {"M"}


class X(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(H, H)

    def forward(self, x, y):
        return torch.tanh(self.fc(x)), torch.tensor([1, 2]), self.fc(y) * 0.5


class A(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(H, H)

    def forward(self, h, _ints, _skip):
        return torch.tanh(self.fc(h))


class M(nn.Module):
    def forward(self, h, _ints, skip):
        return (h + skip).sum(-1)


class S(nn.Module):
    def forward(self, a):
        return a * a


class B(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(H, H, bias=False)

    def forward(self, h, ints, _skip):
        return self.fc(h) * ints.sum()


class L(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, H))

    def forward(self, a, b, _h, _ints, skip, target):
        return (((a * self.w + b - skip) - target) ** 2).mean(), a * 2.0


class Model:
    """What a model factory returns (`model_api.StageModel`), with fixed seeded weights."""

    def __init__(self):
        torch.manual_seed(7)
        self.modules = {"X": X(), "M": M(), "A": A(), "S": S(), "B": B(), "L": L()}
        act = TensorMeta((2, H))
        self.metas = {"X": (act, TensorMeta((2,), torch.int64), act), "M": (TensorMeta((2,)),),
                      "A": (act,), "S": (act,), "B": (act,), "L": (TensorMeta(()), act)}

    def meta(self, block):
        return self.metas[block]

    def data(self, block, mb):
        g = torch.Generator().manual_seed(100 + mb)
        x, y, target = torch.randn(3, 2, H, generator=g)
        return {"X": (x, y), "L": (target,)}.get(block, ())

    def param_shards(self):
        return []

    def grads(self):
        return {f"{n}.{p}": t.grad.clone() for n, m in self.modules.items() for p, t in m.named_parameters()}

    def reference(self, n):
        """One plain autograd pass over the mean loss: every parameter's gradient."""
        m = self.modules
        for mod in m.values():
            mod.zero_grad(set_to_none=True)
        for mb in range(n):
            h, ints, skip = m["X"](*self.data("X", mb))
            a = m["S"](m["A"](h, ints, skip))
            loss, _ = m["L"](a, m["B"](h, ints, skip), h, ints, skip, *self.data("L", mb))
            (loss / n).backward()
        out = self.grads()
        for mod in m.values():
            mod.zero_grad(set_to_none=True)
        return out


def spec(split: bool, n: int) -> Spec:
    blocks, edges = [], []
    for f, preds in FORWARDS.items():
        blocks.append(Block(f, Kind.FORWARD, (0,), 1, 1))
        edges += [Edge(p, f) for p in preds]
        if f in NO_BACKWARD:
            continue
        if split:
            blocks += [Block(f"{f}i", Kind.INPUT_GRAD, (0,), 1, 0, f), Block(f"{f}w", Kind.WEIGHT_GRAD, (0,), 1, -1, f)]
            edges.append(Edge(f"{f}i", f"{f}w"))
        else:
            blocks.append(Block(f"{f}b", Kind.BACKWARD, (0,), 1, -1, f))
    grad = "i" if split else "b"
    edges.append(Edge("L", f"L{grad}"))
    edges += [Edge(f"{f}{grad}", f"{p}{grad}") for f, preds in FORWARDS.items() for p in preds
              if f not in NO_BACKWARD]
    return Spec("grads", 1, 100, tuple(blocks), tuple(edges), n, Mode.TRAIN)


class Watched(RankRunner):
    """Checks after every backward block what the runner still holds: an input gradient keeps its
    forward's graph for the weight gradient, a whole backward and a weight gradient release it,
    and a gradient nothing will read is not kept."""

    def _backward(self, name, mb):
        super()._backward(name, mb)
        b = self.spec.block(name)
        assert ((b.forward, mb) in self.saved) == (b.kind is Kind.INPUT_GRAD), (name, mb)
        assert (name, mb) not in self.values or self.left[(name, mb)] > 0, (name, mb)


def run_step(s: Spec, schedule: str, n: int) -> tuple[Model, dict]:
    sched = build(s, schedule, n)
    plan = Plan(s, sched, lower(s, sched))
    model = Model()
    runner = Watched(plan, model, 0, torch.device("cpu"), timeout=5.0)
    result = runner.step(0, collect=True)
    return model, result


@pytest.mark.parametrize("split", [False, True], ids=["whole", "split"])
@pytest.mark.parametrize("n", [1, 3])
def test_gradients_equal_one_autograd_pass_over_the_mean_loss(split, n):
    model, result = run_step(spec(split, n), "gpipe", n)
    got = model.grads()
    want = model.reference(n)
    assert set(got) == set(want)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6, msg=name)
    assert sorted(result.losses) == list(range(n))
    assert sorted(result.outputs) == [("M", mb) for mb in range(n)]


def test_weight_gradients_deferred_to_the_end_change_nothing():
    # ZB-H1 on a one-device chain runs weight gradients after later input gradients; the saved
    # graph must still give the same gradients (the input gradient keeps it for W).
    s = spec(True, 3)
    sched = build(s, "gpipe", 3)
    # GPipe's order runs each W right after its I; here every W moves to the end.
    order = sorted(sched.slots, key=lambda x: (s.block(x.block).kind is Kind.WEIGHT_GRAD, x.start))
    from tessel_dsl.schedule import Schedule
    from tessel_dsl.search.compact import compact

    keys = [(x.block, x.mb) for x in order]
    late = Schedule(3, compact(s, orders=[keys]))
    plan = Plan(s, late, lower(s, late))
    model = Model()
    Watched(plan, model, 0, torch.device("cpu"), timeout=5.0).step(0)
    got, want = model.grads(), model.reference(3)
    for name in want:
        torch.testing.assert_close(got[name], want[name], rtol=1e-5, atol=1e-6, msg=name)


def test_a_backward_block_without_its_forward_is_refused():
    from tessel_dsl.errors import ExecutionError

    s = spec(False, 1)
    plan = Plan(s, build(s, "gpipe", 1), lower(s, build(s, "gpipe", 1)))
    runner = RankRunner(plan, Model(), 0, torch.device("cpu"), timeout=5.0)
    runner.spec = Spec("grads", 1, 100, tuple(b if b.name != "Ab" else Block("Ab", Kind.BACKWARD, (0,), 1, -1)
                                              for b in s.blocks), s.edges, 1, Mode.TRAIN)
    with pytest.raises(ExecutionError, match="does not name its forward block"):
        runner.step(0)
