"""A bound block sees the submodules of other blocks as stand-ins: zero-stride zeros of their
output's shape, made once per traced batch shape and reused, fresh again once written in place."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from tessel_dsl.executor.bind import Binding, _stand_in  # noqa: E402


class Pair(nn.Module):
    """Block A is `a`, block B is `b`, fed by `a`."""

    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(3, 1), nn.Linear(1, 2)

    def forward(self, x):
        h = self.a(x)
        return self.b(h)


def _traced():
    torch.manual_seed(0)
    model = Pair()
    binding = Binding(model, {"A": ["a"], "B": ["b"]}, {"A": (), "B": ("A",)})
    x = torch.randn(1, 3)
    return model, binding, binding.trace((x,), {}, None, (), torch.device("cpu")), x


def test_a_stand_in_is_made_once_and_made_again_after_an_in_place_write():
    _, _, trace, _ = _traced()
    first = _stand_in(trace, "a", torch.device("cpu"))
    assert first.shape == (1, 1) and first.stride() == (0, 0) and float(first) == 0.0
    assert _stand_in(trace, "a", torch.device("cpu")) is first  # reused: no fill per call
    first.add_(5.0)  # one element: a write in place is allowed, and must not leak into the next call
    again = _stand_in(trace, "a", torch.device("cpu"))
    assert again is not first and float(again) == 0.0


def test_a_block_run_twice_gives_one_process_output():
    model, binding, trace, x = _traced()
    received = model.a(x).detach().requires_grad_(True)
    with torch.no_grad():
        want = model.b(received)
    for _ in range(2):
        (got,) = binding.run_block("B", trace, (received,), (x,), {})
        assert torch.equal(got, want)
    assert set(trace.stand_ins) == {"a"}
