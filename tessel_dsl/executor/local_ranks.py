"""Run a function on several ranks of this host, as torchrun would: ``run_ranks(train, 4)``.

Each rank is a process with ``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``, ``MASTER_ADDR`` and
``MASTER_PORT`` set, so `Pipeline` (or anything using ``init_process_group("env://")``) joins the
group as under torchrun. CPU ranks are forked (no second torch import), CUDA ones spawned. The
first rank to raise stops the others; its error is raised here, naming the rank. Return values
come back in rank order.
"""
from __future__ import annotations

import os
import pickle
import queue
import time
import traceback
from typing import Any, Callable

from tessel_dsl.errors import ExecutionError, TesselError

__all__ = ["run_ranks"]


def _child(fn, args, rank: int, world: int, port: int, out, threads: int) -> None:
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    try:
        import torch

        if not torch.cuda.is_available():
            # Several ranks share the host's cores: a few intra-op threads each avoid oversubscription.
            torch.set_num_threads(threads)
        value = fn(*args)
        out.put((rank, "ok", pickle.dumps(value)))
        try:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
        except Exception:
            pass
    except TesselError as e:
        out.put((rank, "error", f"rank {rank}: {e}"))
    except BaseException as e:
        tb = "\n".join(traceback.format_exc().strip().splitlines()[-8:])
        out.put((rank, "error", f"rank {rank}: {type(e).__name__}: {e}\n{tb}"))


def run_ranks(fn: Callable[..., Any], world: int, *args, timeout: float = 600.0, threads: int = 1) -> list[Any]:
    """Call ``fn(*args)`` on `world` local ranks; returns their results, rank 0 first."""
    import multiprocessing as mp

    import torch

    from tessel_dsl.executor.launch import free_port

    method = "spawn" if torch.cuda.is_available() and torch.cuda.device_count() >= world else "fork"
    ctx = mp.get_context(method)
    out = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=_child, args=(fn, args, r, world, port, out, threads), daemon=True)
             for r in range(world)]
    for p in procs:
        p.start()
    results: dict[int, Any] = {}
    deadline = time.monotonic() + timeout
    try:
        while len(results) < world:
            try:
                rank, status, payload = out.get(timeout=0.2)
            except queue.Empty:
                dead = [r for r, p in enumerate(procs) if p.exitcode not in (None, 0) and r not in results]
                if dead:
                    time.sleep(0.5)  # its own message may still be on the way
                    if out.empty():
                        raise ExecutionError(f"rank {dead[0]} died (exit code {procs[dead[0]].exitcode})") from None
                if time.monotonic() > deadline:
                    raise ExecutionError(f"ranks {sorted(set(range(world)) - set(results))} did not finish "
                                         f"within {timeout:g}s") from None
                continue
            if status == "error":
                raise ExecutionError(payload)
            results[rank] = pickle.loads(payload)
    finally:
        for p in procs:
            p.join(2.0)
            if p.exitcode is None:
                p.kill()
                p.join(2.0)
    return [results[r] for r in range(world)]
