"""What `tessel plan` costs a unit and a block at: the profiler's input and weight gradients split as
the executor runs them (counted in FLOPs, so that I + W is checked against one whole backward and
against the weights' matmuls worked out by hand), the accumulation of the embedding's dense
gradient, and a block spread over devices costed with its collectives and the work that does not
shrink with the number of devices."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from tessel_dsl.placement.profile import profile_model  # noqa: E402


def flops(fn) -> float:
    with FlopCounterMode(display=False) as m:
        fn()
    return float(m.get_total_flops())


def linear_flops(module: nn.Module, tokens: int) -> int:
    """Forward FLOPs of `module`'s linear layers, by hand: 2 x tokens x in x out each. The weight
    gradient of each is the same product again (x^T dy), and nothing else in a layer multiplies a
    parameter by a matrix."""
    return sum(2 * tokens * m.weight.numel() for m in module.modules() if isinstance(m, nn.Linear))


def check_split(model, batch, tokens: int):
    prof = profile_model(model, batch, repeats=1, warmup=0, clock=flops)
    layers = [u for u in prof.units if u.kind == "layer"]
    assert layers
    for u in layers:
        by_hand = linear_flops(model.get_submodule(u.modules[0]), tokens)
        # W runs only the parameters' branches: its FLOPs are the weights' matmuls alone. Timed from
        # the outputs (the former profiler) it ran the whole backward again: I's FLOPs too.
        assert u.weight_grad == by_hand
        assert u.input_grad > 0
        # the two passes together do one backward's work, no more
        assert u.input_grad + u.weight_grad == u.unsplit_backward
    return prof


def test_llama_layers_split_as_the_executor_runs_them():
    pytest.importorskip("transformers")
    from tests.integration.test_plan_train import llama

    prof = check_split(llama(), torch.zeros(1, 8, dtype=torch.long), 8)
    head = prof.units[-1]
    assert head.kind == "head" and head.weight_grad == 2 * 8 * 32 * 96  # hidden 32 -> vocab 96


def test_shipped_gpt_layers_split_as_the_executor_runs_them():
    from tessel_dsl.executor.models.common import seeded
    from tessel_dsl.executor.models.gpt import GPT, Config

    model = seeded(GPT, Config.of({"vocab": 64, "hidden": 16, "heads": 2, "layers": 2, "seq": 8, "batch": 2}),
                   torch.device("cpu"))
    tokens, _ = model.batch(0, torch.device("cpu"))
    check_split(model, tokens, 16)


class AccumulatedElements(TorchDispatchMode):
    """Elements added in place into an existing tensor (a gradient accumulating into `.grad`)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func is torch.ops.aten.add_.Tensor:
            self.count += args[0].numel()
        return func(*args, **(kwargs or {}))


def accumulated(fn) -> float:
    with AccumulatedElements() as m:
        fn()
    return float(m.count)


class Embedded(nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(50, 6)
        self.layer = nn.Linear(6, 6)
        self.head = nn.Linear(6, 50, bias=False)

    def forward(self, tokens):
        return self.head(torch.relu(self.layer(self.embed(tokens))))


def test_weight_gradients_accumulate_into_grad_as_in_a_pipeline():
    """From a step's second micro-batch on, every weight gradient is added into `.grad`: for the
    embedding a dense table-sized add (50 x 6 here) each micro-batch, which the profile counts."""
    model = Embedded()
    prof = profile_model(model, torch.zeros(2, 3, dtype=torch.long), repeats=1, warmup=0, clock=accumulated,
                         units=[["embed"], ["layer"], ["head"]])
    embed, layer, head = prof.units
    assert embed.weight_grad == 50 * 6 and embed.unsplit_backward == 50 * 6
    # The layer's bias (one-dimensional) is added in the input pass, its weight in the weight pass.
    assert layer.weight_grad == 6 * 6 and layer.input_grad == 6 and head.weight_grad == 50 * 6
    assert all(p.grad is None for p in model.parameters())  # the model is left as it was given


# -- a block spread over devices -------------------------------------------------------------------

def spread_units():
    from tessel_dsl.placement.costs import Unit

    embed = Unit("embed", ("embed",), 0.002, 0.0, 0.006, 10, 0, kind="embedding", unsplit_backward=0.006)
    norm = Unit("norm", ("norm",), 0.001, 0.002, 0.001, 10, 10**6, kind="norm", unsplit_backward=0.0028)
    head = Unit("head", ("head",), 0.004, 0.004, 0.008, 10, 10**6, kind="head", unsplit_backward=0.011,
                loss_forward=0.002, loss_backward=0.002)
    return embed, norm, head


def test_a_spread_head_pays_its_collectives_and_what_does_not_shrink():
    """Worked by hand: 4 devices, links of 1 GB/s and 10 us, a 1 MB input, 1000 tokens.
    Forward: the input to 3 more devices (10 us + 3 MB / 1 GB/s = 3.01 ms), three ring all-reduces
    of 4 kB (6 steps: 60 us + 6 us, each) = 3.208 ms; the norm whole (1 ms), the head and its loss
    over 4 ((4 + 2) / 4 ms). Backward: the 1 MB input gradient all-reduced (60 us + 1.5 ms), the
    norm whole (2.8 ms), the head and the loss's backward over 4 ((11 + 2) / 4 ms)."""
    from tessel_dsl.placement.candidates import Group, spread_comm
    from tessel_dsl.placement.costs import Links

    _, norm, head = spread_units()
    comm = spread_comm((norm, head), 4, Links(1e9, 1e-5), 1000)
    assert comm == pytest.approx((3.208e-3, 1.56e-3))
    h = Group("H", (norm, head), (0, 1, 2, 3), *comm)
    assert h.forward == pytest.approx(0.001 + 0.006 / 4 + 3.208e-3)
    assert h.backward == pytest.approx(0.0028 + 0.013 / 4 + 1.56e-3)
    # the former cost, the profile over D with nothing else, was (1 + 4) / 4 ms forward
    assert h.forward > 4 * (0.001 + 0.004) / 4


def test_a_spread_embedding_builds_its_rows_weight_gradient():
    """Forward: the lookup over 4 (0.5 ms) and its partial outputs all-reduced (1 MB: 1.56 ms);
    backward: each device's rows of the table's gradient (6 ms over 4, as `tp_plans`' sharded
    embedding builds it) and the output gradient sent from the first stage's device to the 3 others
    (3.01 ms)."""
    from tessel_dsl.placement.candidates import Group, spread_comm
    from tessel_dsl.placement.costs import Links

    embed, _, _ = spread_units()
    comm = spread_comm((embed,), 4, Links(1e9, 1e-5), 1000, out_bytes=10**6)
    e = Group("E", (embed,), (0, 1, 2, 3), *comm)
    assert e.forward == pytest.approx(0.0005 + 1.56e-3)
    assert e.backward == pytest.approx(0.0015 + 3.01e-3)
    # DTensor's RowwiseParallel builds the whole table's gradient on each device: 6 ms
    whole = Group("E", (embed,), (0, 1, 2, 3), *comm, dense_grad=True)
    assert whole.backward == pytest.approx(0.006 + 3.01e-3)


def test_the_link_model_reaches_the_candidates():
    """mshape-H's H block is longer on slower links; the chain, which spreads nothing, is not, but
    its stage-boundary transfer becomes the spec's link: 1 ms + 1 MB at 100 MB/s = 11 ms (on the
    fast links 1 us, under the time resolution: no link)."""
    from tessel_dsl.placement.candidates import candidates
    from tessel_dsl.placement.costs import Links, Profile, Unit

    embed, norm, head = spread_units()
    layers = [Unit(f"layer{i}", (f"layers.{i}",), 0.003, 0.003, 0.003, 10, 10**6, unsplit_backward=0.006)
              for i in range(4)]
    prof = Profile((embed, *layers, norm, head), "cpu", (1, 1000))

    def texts(links):
        return {c.name: c.text for c in candidates(prof, 2, 10**12, 4, links=links)}

    fast, slow = texts(Links(1e12, 0.0)), texts(Links(1e8, 1e-3))
    assert "link" not in fast["chain"]
    assert slow["chain"].replace("link latency 11ms\n", "") == fast["chain"]
    line = [x for x in slow["mshape-H"].splitlines() if x.startswith("forward H ")]
    assert line and line[0] not in fast["mshape-H"]


def test_a_split_backward_costs_at_most_one_unsplit_backward():
    """Worked by hand from the 4 x H200 GPT layer's profile (ms): I 1.6, W 2.4, unsplit B 3.2: the
    weight pass is costed B - I = 1.6 (the run measured 1.57 a layer), the input pass as measured.
    A W already under B - I is kept; a profile without an unsplit backward keeps W; an I over B
    (a norm's noise) leaves W nothing."""
    from tessel_dsl.placement.candidates import split_weight_grad
    from tessel_dsl.placement.costs import Unit

    layer = Unit("layer0", ("layers.0",), 1.3e-3, 1.6e-3, 2.4e-3, 10, 10, unsplit_backward=3.2e-3)
    assert split_weight_grad(layer) == pytest.approx(1.6e-3)
    assert split_weight_grad(Unit("l", ("l",), 1e-3, 1e-3, 1e-3, 1, 1, unsplit_backward=3e-3)) == 1e-3
    assert split_weight_grad(Unit("l", ("l",), 1e-3, 1e-3, 2.5e-3, 1, 1)) == 2.5e-3
    assert split_weight_grad(Unit("n", ("n",), 1e-4, 2.7e-4, 2.4e-4, 1, 1, kind="norm",
                                  unsplit_backward=2e-4)) == 0.0


def test_a_block_that_begins_with_the_embedding_has_no_input_gradient():
    """The first stage of a chain gets token ids: the executor's input pass has nothing to
    differentiate and its weight pass runs the whole backward. By hand (ms): embedding W 0.6
    (unsplit 0.6), two layers of I 1.6, W 2.4, unsplit 3.2: I = 0, W = 0.6 + 2 x (1.6 + 1.6) = 7.0
    (the 4 x H200 run's first stage: I 0.003, W 6.72 ms). The next block keeps its I and pays
    B - I for W."""
    from tessel_dsl.placement.candidates import Group, candidates
    from tessel_dsl.placement.costs import Profile, Unit

    embed = Unit("embed", ("embed",), 0.1e-3, 0.0, 0.6e-3, 10, 0, kind="embedding", unsplit_backward=0.6e-3)
    layers = [Unit(f"layer{i}", (f"layers.{i}",), 1.3e-3, 1.6e-3, 2.4e-3, 10, 10, unsplit_backward=3.2e-3)
              for i in range(4)]
    first = Group("F0", (embed, *layers[:2]), (0,))
    assert not first.takes_input_grad
    assert first.input_grad == 0.0 and first.weight_grad == pytest.approx(7.0e-3)
    second = Group("F1", tuple(layers[2:]), (1,))
    assert second.input_grad == pytest.approx(3.2e-3) and second.weight_grad == pytest.approx(3.2e-3)
    # and so in the generated spec (resolution 100 us: the longest action, 7 ms, over 50, floored to a
    # round step)
    split = {c.name: c for c in candidates(Profile((embed, *layers), "gpu", (1, 8)), 2, 10**12, 4)}["chain-split"]
    lines = split.text.splitlines()
    assert "input_grad I0 of F0 time 100us" in lines           # the least a block can take: one unit
    assert any(x.startswith("weight_grad W0 of F0 time 7ms") for x in lines)
    assert "input_grad I1 of F1 time 3200us" in lines
