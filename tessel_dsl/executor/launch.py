"""Starting the ranks on one host: check the plan, spawn (or fork) one process per device, and
supervise them.

Every rank runs `rank.rank_main` (under `torchrun` too, see `executor.__main__`). Nothing hangs
silently: each rank's watchdog reports a stall, and the supervisor here stops all ranks as soon
as one fails and reports the first cause, or reports ranks that made no progress at all.

`Options`, `Channel` and `rank_main` live in `tessel_dsl.executor.rank` and are importable from here too.
"""
from __future__ import annotations

import os
import pickle
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tessel_dsl.errors import ExecutionError, PlanError, TesselError
from tessel_dsl.executor.rank import Channel, Options, rank_main
from tessel_dsl.executor.run_report import RunReport
from tessel_dsl.plan import Plan, load_plan, plan_to_json
from tessel_dsl.plan_check import validate_plan
from tessel_dsl.program import Op

__all__ = ["Channel", "Options", "check_plan", "free_port", "load", "rank_main", "spawn"]

# The order in which to blame failures. A rank that died without a word (killed, crashed) is
# the cause of whatever its peers then report: their transfers with it fail, often as a raw
# RuntimeError from the communication library. After that, a block that raised beats a rank that
# stalled, which beats ranks that merely timed out waiting for the others.
_SEVERITY = {"died": 0, "raised": 1, "stalled": 2, "comm": 3}

# Started with ``python -c BOOT JOB RANK``: the working directory, which ``python -m`` would put
# first on sys.path, is removed before anything is imported, so a stray ``tessel_dsl.py``,
# ``executor.py`` or ``torch.py`` there is never run. Only the installed package (or the source
# tree this launcher came from) and the folder holding the ``--model`` module are searched, the
# latter after everything else.
_BOOT = ("import sys; sys.path[:] = [p for p in sys.path if p not in ('', '.')]; "
         "sys.path.extend(sys.argv[3:]); sys.argv[:] = sys.argv[:3]; "
         "import runpy; runpy.run_module('tessel_dsl.executor.worker', run_name='__main__', alter_sys=False)")


def check_plan(plan: Plan, nproc: int | None = None) -> int:
    """The world size the plan needs; raises PlanError when the plan cannot run.

    The whole plan is validated first (`tessel_dsl.plan_check`), so a Plan built or edited in
    Python is held to the same rules as a plan file: nothing starts for a plan that would compute
    the wrong thing."""
    spec = plan.spec
    if not plan.programs:
        raise PlanError(f"plan {spec.name!r} has no programs: lower it first (tessel search writes them)")
    validate_plan(plan, f"plan {spec.name!r}")
    if len(plan.programs) != spec.devices or any(p.device != d for d, p in enumerate(plan.programs)):
        raise PlanError(f"plan {spec.name!r}: expected one program per device 0..{spec.devices - 1}")
    if nproc is not None and nproc != spec.devices:
        raise ExecutionError(f"the plan places blocks on {spec.devices} devices but --nproc is {nproc}")
    for prog in plan.programs:
        for a in prog.actions:
            if a.block not in spec.by_name:
                raise PlanError(f"device {prog.device}: action {a} names unknown block {a.block!r}")
            if a.op is Op.COMPUTE and prog.device not in spec.block(a.block).devices:
                raise PlanError(f"device {prog.device} computes {a} but {a.block} is not placed on it")
    sent: dict[tuple[int, int], list[str]] = {}
    got: dict[tuple[int, int], list[str]] = {}
    for prog in plan.programs:
        for a in prog.actions:
            if a.op is Op.SEND:
                for p in a.peers:
                    sent.setdefault((prog.device, p), []).append(f"{a.block}:{a.mb}")
            elif a.op is Op.RECV:
                got.setdefault((a.peers[0], prog.device), []).append(f"{a.block}:{a.mb}")
    for key in sorted(set(sent) | set(got)):
        s, r = sent.get(key, []), got.get(key, [])
        if s != r:
            i = next((i for i, (x, y) in enumerate(zip(s, r)) if x != y), min(len(s), len(r)))
            raise PlanError(f"device {key[0]} sends to device {key[1]} in another order than it receives "
                            f"(message {i + 1}: sent {s[i] if i < len(s) else 'nothing'}, "
                            f"received {r[i] if i < len(r) else 'nothing'}); NCCL needs one order per direction")
    for b in spec.blocks:
        if b.kind.is_backward and (b.forward not in spec.by_name or
                                   set(spec.block(b.forward).devices) != set(b.devices)):
            raise PlanError(f"backward block {b.name!r} must run on the devices of its forward block "
                            f"({b.forward!r}) to reuse its saved activations")
    return spec.devices


# -- the rank side -----------------------------------------------------------------------------

def spawn(plan: Plan, opts: Options, nproc: int | None = None) -> RunReport:
    """Start one process per device on this host, wait for them, return rank 0's merged report.

    Ranks are fresh interpreters (the worker module, started so that the working directory is not
    on their import path: see `_BOOT`), so nothing of the caller's process -- a CLI, a test
    runner -- is re-imported or inherited."""
    world = check_plan(plan) * opts.replicas
    _check_settings()
    if nproc is not None and nproc != world:
        raise ExecutionError(f"the plan places blocks on {plan.spec.devices} devices x {opts.replicas} replica(s) "
                             f"= {world} ranks, but --nproc is {nproc}")
    with tempfile.TemporaryDirectory(prefix="tessel-run-") as tmp:
        job = Path(tmp)
        (job / "progress").write_bytes(bytes(24 * world))
        init = (job / "store").as_uri()
        (job / "job").write_bytes(pickle.dumps((plan_to_json(plan), opts, world, init)))
        env = dict(os.environ)
        import tessel_dsl

        root = str(Path(tessel_dsl.__file__).resolve().parent.parent)  # where this tessel_dsl is found
        if opts.backend == "nccl":
            # Loading a kernel lazily while an NCCL kernel spins waiting for a peer can block the
            # host; with sends and receives in flight during compute that is the normal case.
            env.setdefault("CUDA_MODULE_LOADING", "EAGER")
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        if _can_fork(opts):
            _preload(opts.model)
            procs = [_Forked(job, r, world) for r in range(world)]
        else:
            extra = _model_root(opts.model)
            procs = [subprocess.Popen([sys.executable, "-c", _BOOT, tmp, str(r), *extra], env=env)
                     for r in range(world)]
        try:
            return _supervise(plan, opts, procs, job, world)
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
            for p in procs:
                try:
                    p.wait(5)
                except subprocess.TimeoutExpired:
                    pass


def _check_settings() -> None:
    """The executor's environment settings, read before any rank starts: a bad value is one
    error here rather than every rank dying on it."""
    from tessel_dsl.executor.comm import comm_streams_mode, recv_post_mode
    from tessel_dsl.executor.copy_links import min_slots, transport_mode

    try:
        recv_post_mode()
        comm_streams_mode()
        transport_mode()
        min_slots()
    except ValueError as e:
        raise ExecutionError(str(e)) from None


def _model_root(model: str) -> list[str]:
    """The folder the ``--model`` module is imported from here, if it is not an installed one
    (a ``mymodel.py`` beside the plan): the ranks search it last."""
    import importlib.util

    top = str(model).partition(":")[0].split(".")[0]
    if not top or top == "tessel_dsl":
        return []
    try:
        found = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        found = None
    if found is None:
        # Not importable here (a console script does not search the working directory): a model
        # file in the working directory is what `--model mymodel:factory` means.
        cwd = Path.cwd()
        return [str(cwd)] if (cwd / f"{top}.py").is_file() or (cwd / top / "__init__.py").is_file() else []
    if not found.origin or found.origin in ("built-in", "frozen"):
        return []
    path = Path(found.origin).resolve()
    root = path.parent.parent if path.name == "__init__.py" else path.parent
    return [str(root)]


def _can_fork(opts: Options) -> bool:
    """CPU ranks can be forked from this process (no second torch import, which dominates a
    small run); CUDA cannot survive a fork, and TESSEL_START=spawn forces fresh interpreters."""
    if opts.backend != "gloo" or os.environ.get("TESSEL_START", "fork") != "fork" or not hasattr(os, "fork"):
        return False
    import torch

    return not torch.cuda.is_initialized()


def _preload(model: str) -> None:
    """Import in the parent what every forked rank would otherwise import on its own."""
    import torch
    import torch.distributed  # noqa: F401
    import torch.nn.functional as F

    from tessel_dsl.executor import groups, runtime  # noqa: F401
    from tessel_dsl.executor.model_api import load_factory

    x = torch.ones(2, 2, requires_grad=True)
    y = F.scaled_dot_product_attention(x[None, None], x[None, None], x[None, None])
    torch.autograd.backward([y], [torch.ones_like(y)])  # the first call imports sympy
    try:
        load_factory(model)
    except TesselError:
        pass  # reported by the ranks with the rank's name on it


class _Forked:
    """A forked rank with the `subprocess.Popen` methods the supervisor uses."""

    def __init__(self, job: Path, rank: int, world: int):
        import multiprocessing as mp

        self.proc = mp.get_context("fork").Process(target=_forked_main, args=(job, rank), daemon=True)
        self.proc.start()

    def poll(self):
        return self.proc.exitcode

    @property
    def returncode(self):
        return self.proc.exitcode

    def kill(self) -> None:
        self.proc.kill()

    def wait(self, timeout: float | None = None):
        self.proc.join(timeout)
        if self.proc.exitcode is None:
            raise subprocess.TimeoutExpired("rank", timeout)
        return self.proc.exitcode


def _forked_main(job: Path, rank: int) -> None:
    try:
        plan_json, opts, world, init = pickle.loads((job / "job").read_bytes())
        rank_main(rank, world, plan_json, opts, init, Channel(job, rank, world))
    except BaseException:
        # rank_main reports its own failures; this only catches a rank that fails after the
        # supervisor has already reported and cleaned up (its job folder is gone), which must
        # not print a second, confusing traceback.
        os._exit(1)
    os._exit(0)


ERROR_GRACE = 5.0  # seconds the supervisor waits, after a rank's error, for the other ranks' messages


def _supervise(plan: Plan, opts: Options, procs, job: Path, world: int) -> RunReport:
    import mmap

    with open(job / "progress", "r+b") as fh:
        progress = memoryview(mmap.mmap(fh.fileno(), 24 * world)).cast("d")
        errors: dict[int, tuple[str, str]] = {}
        first_error_at: float | None = None
        last_seen, last_change = [0.0] * world, time.monotonic()
        while True:
            time.sleep(0.05)
            now = time.monotonic()
            if (job / "result").exists():
                return pickle.loads((job / "result").read_bytes())
            for r, p in enumerate(procs):
                f = job / f"error.{r}"
                if r not in errors and f.exists():
                    errors[r] = pickle.loads(f.read_bytes())
                elif r not in errors and p.poll() not in (None, 0):
                    time.sleep(0.2)  # let a failing rank's own message land first
                    if f.exists():
                        errors[r] = pickle.loads(f.read_bytes())
                    else:
                        errors[r] = ("died", f"rank {r} died (exit code {p.returncode}) at {_where(plan, progress, r)}")
                if progress[r * 3 + 2] != last_seen[r]:
                    last_seen[r], last_change = progress[r * 3 + 2], now
            if errors and first_error_at is None:
                first_error_at = now
            # After the first error, wait for the others' messages (the most telling one is reported):
            # until every rank has reported or exited cleanly, at most ERROR_GRACE seconds. A peer's
            # communication timeout can come a second before the stalled rank's own report.
            if first_error_at is not None and (
                    now - first_error_at > ERROR_GRACE
                    or all(r in errors or p.poll() == 0 for r, p in enumerate(procs))):
                break
            if first_error_at is None and all(p.poll() is not None for p in procs):
                if (job / "result").exists():
                    continue
                errors[0] = ("died", "all ranks exited without a result")
                break
            if first_error_at is None and now - last_change > opts.timeout + 30:
                for r in range(world):
                    errors[r] = ("stalled", f"rank {r} made no progress for {now - last_change:.0f}s "
                                            f"at {_where(plan, progress, r)}")
                break
        ranked = sorted(errors.items(), key=lambda kv: (_SEVERITY.get(kv[1][0], 9), kv[0]))
        head = ranked[0][1][1]
        others = [_plain(msg.splitlines()[0]) for _, (_, msg) in ranked[1:]]
        progress.release()
    more = ("\nother ranks:\n  " + "\n  ".join(others)) if others else ""
    raise ExecutionError(head + more)


def _plain(line: str) -> str:
    """One rank's message without the communication library's source locations
    (``[../third_party/gloo/.../pair.cc:534]``), which say nothing to a user."""
    import re

    return re.sub(r"\[[^\[\]]*\.(?:cc|cpp|cu|h|hpp):\d+\]\s*", "", line)


def _where(plan: Plan, progress, rank: int) -> str:
    it, i = int(progress[rank * 3]), int(progress[rank * 3 + 1])
    acts = plan.programs[rank % plan.spec.devices].actions  # replicas run the same programs
    what = str(acts[i]) if i < len(acts) else "end of step"
    return f"iteration {it}, step {min(i + 1, len(acts))}/{len(acts)} ({what})"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load(plan: Plan | str | os.PathLike) -> Plan:
    return plan if isinstance(plan, Plan) else load_plan(plan)
