"""The per-rank program loop: run one device's actions in order, exactly as the plan says.

Forward blocks call the user's block modules on detached inputs, so each block is its own autograd
island and a backward block can return the gradients of exactly its block's inputs. Backward blocks
replay autograd on the saved forward of their micro-batch, seeded with the gradient of the block's
outputs (received or local) or, for the loss block, with 1/N. A split backward runs the input
gradient first, keeping the gradients where the parameters' branches leave the input path, and
the weight gradient later from those alone (executor/split_backward.py).
"""
from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable

import torch

from tessel_dsl.errors import ExecutionError
from tessel_dsl.executor.comm import CommTimeout, MessageManager
from tessel_dsl.executor.model_api import StageModel, backward_of, forward_preds, forward_succs, grad_meta, grad_slice
from tessel_dsl.executor.split_backward import backward_input, prepare
from tessel_dsl.ir import Kind, Mode
from tessel_dsl.plan import Plan
from tessel_dsl.program import Action, Op

Key = tuple[str, int]


@dataclass
class StepResult:
    """What one rank saw in one iteration: action timings (seconds from the step start) and,
    when asked, the losses of the micro-batches whose loss block ran here (0-dim tensors, left
    on the device) and sink outputs.

    On CUDA the timings are events until `timings` is first read, which waits for the last of
    them: the step itself never waits for the GPU, so the host can queue the next one."""

    losses: dict[int, torch.Tensor] = field(default_factory=dict)
    outputs: dict[Key, torch.Tensor] = field(default_factory=dict)
    marks: list[tuple[str, object, object]] = field(default_factory=list)
    origin: object = None  # the CUDA event of the step's start; None once `marks` are seconds

    @property
    def timings(self) -> list[tuple[str, float, float]]:
        if self.origin is not None:
            if self.marks:
                self.marks[-1][2].synchronize()
            e0 = self.origin
            self.marks = [(s, e0.elapsed_time(a) / 1e3, e0.elapsed_time(b) / 1e3) for s, a, b in self.marks]
            self.origin = None
        return self.marks


def early_receives(actions: tuple[Action, ...]) -> dict[int, list[Key]]:
    """``lead`` posting: compute index -> the receives to start right before that compute: those
    waited for before the next compute, once their ``RECV`` has come (a receive noted later than
    the compute before it gains nothing from starting early and waits for its ``WAIT``)."""
    out: dict[int, list[Key]] = {}
    noted: set[Key] = set()
    for i, a in enumerate(actions):
        if a.op is Op.RECV:
            noted.add((a.block, a.mb))
        if a.op is not Op.COMPUTE:
            continue
        for b in actions[i + 1:]:
            if b.op is Op.COMPUTE:
                break
            if b.op is Op.WAIT and (b.block, b.mb) in noted:
                out.setdefault(i, []).append((b.block, b.mb))
    return out


class RankRunner:
    """Executes `plan.programs[rank]` with the blocks of `stage`."""

    def __init__(self, plan: Plan, stage: StageModel, rank: int, device: torch.device, timeout: float,
                 progress: Callable[[int, int, str], None] | None = None, links: dict | None = None,
                 ranks: tuple[int, ...] | None = None, copies=None):
        self.plan, self.spec, self.stage, self.rank, self.device = plan, plan.spec, stage, rank, device
        self.program = plan.programs[rank]
        self.train = plan.spec.mode is Mode.TRAIN
        self.scale = 1.0 / max(1, plan.schedule.microbatches)
        # Per micro-batch loss seeds in place of 1/N (weighted means): numbers or 0-dim tensors.
        self.seeds: list[float | torch.Tensor] | None = None
        self.progress = progress or (lambda *_: None)
        tags = {b.name: i for i, b in enumerate(plan.spec.blocks)}
        self.comm = MessageManager(device, timeout, tags, rank, links or {}, ranks, copies=copies)
        # Read from the spec once: each action would otherwise scan its blocks and edges again.
        self.preds = {b.name: forward_preds(self.spec, b.name) for b in self.spec.blocks}
        self.succs = {b.name: forward_succs(self.spec, b.name) for b in self.spec.blocks}
        self.backward = {b.name: backward_of(self.spec, b.name) for b in self.spec.blocks}
        self.labels = [str(a) for a in self.program.actions]
        self.param_lists: dict[str, list[torch.Tensor]] = {}
        self.uses = self._count_uses()
        self.early = early_receives(self.program.actions) if self.comm.post == "lead" and not self.program.blocking else {}

    # -- reading the program ---------------------------------------------------------------
    def _reads(self, a: Action) -> list[Key]:
        b = self.spec.block(a.block)
        if a.op is Op.SEND:
            return [(a.block, a.mb)]
        if a.op is not Op.COMPUTE:
            return []
        if not b.kind.is_backward:
            return [(p, a.mb) for p in self.preds[a.block]]
        if b.kind is Kind.WEIGHT_GRAD:
            return []
        return [(bs, a.mb) for s in self.succs[b.forward] if (bs := self.backward[s])]

    def _count_uses(self) -> Counter:
        return Counter(k for a in self.program.actions for k in self._reads(a))

    def is_loss_block(self, name: str) -> bool:
        return self.train and not self.succs[name] and self.backward[name] is not None

    # -- one iteration ---------------------------------------------------------------------
    def step(self, iteration: int, collect: bool = False, wait: bool = True) -> StepResult:
        """Run the whole program once; raises ExecutionError naming rank, step and action. With
        `wait`, return once the GPU has finished it (the executor measures every iteration
        from an idle GPU); without, as soon as it is queued (`Pipeline.step`)."""
        self.values: dict[Key, tuple[torch.Tensor, ...]] = {}
        self.saved: dict[Key, tuple] = {}
        self.left = Counter(self.uses)
        self.param_lists: dict[str, list[torch.Tensor]] = {}  # `_params`, read once a step
        result = StepResult()
        cuda = self.device.type == "cuda"
        t0 = time.perf_counter()
        if cuda:
            result.origin = torch.cuda.Event(enable_timing=True)
            result.origin.record()
        n = len(self.program.actions)
        for i, a in enumerate(self.program.actions):
            label = self.labels[i]
            self.progress(iteration, i, label)
            for key in self.early.get(i, ()):
                self.comm.start_early(*key)
            start = torch.cuda.Event(enable_timing=True) if cuda else time.perf_counter()
            if cuda:
                start.record()
            try:
                self._execute(a, result, collect)
            except ExecutionError:
                raise
            except CommTimeout as e:
                raise ExecutionError(f"{self._where(iteration, i)}: {e}") from None
            except Exception as e:  # the user's block code: report where it broke
                raise ExecutionError(f"{self._where(iteration, i)}: {type(e).__name__}: {e}") from e
            if cuda:
                end = torch.cuda.Event(enable_timing=True)
                end.record()
                result.marks.append((label, start, end))
            else:
                result.marks.append((label, start - t0, time.perf_counter() - t0))
        self.progress(iteration, n, "end of step (waiting for sends)")
        try:
            self.comm.drain()
        except CommTimeout as e:
            raise ExecutionError(f"rank {self.rank}, iteration {iteration}, end of step: {e}") from None
        if cuda and wait:
            torch.cuda.synchronize(self.device)
        self.values.clear()
        self.saved.clear()
        return result

    def _where(self, iteration: int, i: int) -> str:
        return f"rank {self.rank}, iteration {iteration}, step {i + 1}/{len(self.labels)} ({self.labels[i]})"

    def _use(self, key: Key) -> tuple[torch.Tensor, ...]:
        if key not in self.values:
            raise ExecutionError(
                f"rank {self.rank} needs {key[0]}:{key[1]}, which it neither computed nor received "
                f"(is an edge missing from the spec, or was the plan lowered for another spec?)")
        value = self.values[key]
        self.left[key] -= 1
        if self.left[key] <= 0:
            del self.values[key]
        return value

    def _execute(self, a: Action, result: StepResult, collect: bool) -> None:
        comm = self.comm
        if a.op is Op.SEND:
            comm.post_send(a.block, a.mb, self._use((a.block, a.mb)), a.peers)
            if self.program.blocking:
                comm.wait_sends()
        elif a.op is Op.RECV:
            comm.post_recv(a.block, a.mb, self._message_meta(a.block), a.peers[0])
            if self.program.blocking:
                self.values[(a.block, a.mb)] = comm.wait_recv(a.block, a.mb)
        elif a.op is Op.WAIT:
            self.values[(a.block, a.mb)] = comm.wait_recv(a.block, a.mb)
        else:
            kind = self.spec.block(a.block).kind
            if kind.is_backward:
                self._backward(a.block, a.mb)
            else:
                self._forward(a.block, a.mb, result, collect)

    def _message_meta(self, block: str):
        b = self.spec.block(block)
        if b.kind.is_backward:
            return grad_meta(self.spec, self.stage, b.forward)
        return self.stage.meta(block)

    # -- compute ---------------------------------------------------------------------------
    def _forward(self, name: str, mb: int, result: StepResult, collect: bool) -> None:
        module = self.stage.modules.get(name)
        if module is None:
            raise ExecutionError(f"rank {self.rank}: the model has no module for block {name!r}")
        inputs: list[torch.Tensor] = []
        for p in self.preds[name]:
            for t in self._use((p, mb)):
                if self.train and t.is_floating_point():
                    t = t.detach().requires_grad_(True)
                inputs.append(t)
        data = tuple(self.stage.data(name, mb))
        with torch.set_grad_enabled(self.train):
            out = module(*inputs, *data)
        out = out if isinstance(out, tuple) else (out,)
        bwd = self.backward[name] if self.train else None
        if bwd is not None:
            split = None
            if self.spec.block(bwd).kind is Kind.INPUT_GRAD:
                # Read the graph now, while the device runs the forward, not when the input
                # gradient is due (the pass it splits is then on the critical path).
                split = prepare([o for o in out if o.requires_grad], self._leaves(inputs), self._params(name))
            self.saved[(name, mb)] = (inputs, out, split)
        if self.is_loss_block(name):
            if collect:
                result.losses[mb] = out[0].detach()
        elif collect and not self.spec.succs[name]:
            result.outputs[(name, mb)] = tuple(o.detach().cpu() for o in out)
        if self.left[(name, mb)] > 0:
            self.values[(name, mb)] = tuple(o.detach() for o in out)

    def _output_grads(self, fwd: str, mb: int, outs: tuple[torch.Tensor, ...]) -> list[torch.Tensor | None]:
        """Gradient of each output tensor of `fwd`: 1/N for the loss, else summed over consumers."""
        if self.is_loss_block(fwd):
            seed = self.seeds[mb] if self.seeds is not None else self.scale
            # A tensor seed is copied on the device: full_like would read it on the host.
            grad = torch.empty_like(outs[0]).copy_(seed) if isinstance(seed, torch.Tensor) else torch.full_like(outs[0], seed)
            return [grad] + [None] * (len(outs) - 1)
        floats = [i for i, o in enumerate(outs) if o.is_floating_point()]
        grads: list[torch.Tensor | None] = [None] * len(outs)
        for s in self.succs[fwd]:
            bs = self.backward[s]
            if bs is None:
                continue
            part = self._use((bs, mb))[grad_slice(self.spec, self.stage, s, fwd)]
            for i, g in zip(floats, part):
                grads[i] = g if grads[i] is None else grads[i] + g
        return grads

    @staticmethod
    def _leaves(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        return [t for t in inputs if t.is_floating_point()]

    def _params(self, fwd: str) -> list[torch.Tensor]:
        """The trained parameters of block `fwd`, walked once a step (every micro-batch's forward
        and input gradient asks; what is trained may change between steps, not within one)."""
        got = self.param_lists.get(fwd)
        if got is None:
            got = self.param_lists[fwd] = [p for p in self.stage.modules[fwd].parameters() if p.requires_grad]
        return got

    def _backward(self, name: str, mb: int) -> None:
        b = self.spec.block(name)
        fwd = b.forward
        if fwd is None:
            raise ExecutionError(f"backward block {name!r} does not name its forward block")
        if b.kind is Kind.WEIGHT_GRAD:
            self.saved.pop((fwd, mb)).run()
            return
        inputs, outs, split = self.saved.pop((fwd, mb))
        grads = self._output_grads(fwd, mb, outs)
        pairs = [(o, g) for o, g in zip(outs, grads) if g is not None and o.requires_grad]
        leaves = self._leaves(inputs)
        t_outs, t_grads = [o for o, _ in pairs], [g for _, g in pairs]
        if b.kind is Kind.INPUT_GRAD:
            in_grads, self.saved[(fwd, mb)] = backward_input(t_outs, t_grads, leaves, self._params(fwd), split)
        else:
            if pairs:
                torch.autograd.backward(t_outs, t_grads)
            in_grads = [t.grad for t in leaves]
        if self.left[(name, mb)] > 0:
            self.values[(name, mb)] = tuple(
                g if g is not None else torch.zeros_like(t) for g, t in zip(in_grads, leaves))
