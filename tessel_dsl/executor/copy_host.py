"""The copy links' CPU stand-in (executor/copy_links.py): every rank's buffer and signal pad in
one shared file, a thread per link for the sends (the GPU's link streams), host loops for the
flags (the GPU's one-thread kernels). Gloo tests run the copy links' layout and protocol on it;
`TESSEL_TRANSPORT=copy` asks for it on the CPU (`auto` keeps gloo's own transfers there)."""
from __future__ import annotations

import os
import queue
import tempfile
import threading
import time

import torch
import torch.distributed as dist

ALIGN = 256  # bytes between one rank's pad and the next rank's buffer


class HostMemory:
    """The CPU stand-in: the buffers and pads of every rank in one shared file, a thread per link
    for the sends, host loops for the flags. Lets gloo tests run the protocol of `CudaMemory`."""

    def __init__(self, nbytes: int, group, flags: int, timeout: float):
        world, me = dist.get_world_size(group), dist.get_rank(group)
        self.pad_bytes = -(-4 * flags // ALIGN) * ALIGN
        self.stride, self.nbytes, self.flags = nbytes + self.pad_bytes, nbytes, flags
        path = [None]
        if me == 0:
            fd, path[0] = tempfile.mkstemp(prefix="tessel-copy-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
            os.ftruncate(fd, world * self.stride)
            os.close(fd)
        dist.broadcast_object_list(path, src=dist.get_global_rank(group, 0) if group is not None else 0, group=group)
        self.file = torch.from_file(path[0], shared=True, size=world * self.stride, dtype=torch.uint8)
        dist.barrier(group=group)
        if me == 0:
            os.unlink(path[0])  # the mappings stay; nothing is left behind
        self.timeout = timeout
        self.workers: dict[int, _Worker] = {}

    def region(self, g: int) -> torch.Tensor:
        return self.file[g * self.stride:g * self.stride + self.nbytes]

    def _flag(self, g: int, channel: int, me: int | None = None) -> torch.Tensor:
        world = self.file.numel() // self.stride
        pad = self.file[g * self.stride + self.nbytes:(g + 1) * self.stride].view(torch.int32)
        return pad[channel * world + (dist.get_rank() if me is None else me):][:1]

    def put(self, g: int, channel: int) -> None:
        flag = self._flag(g, channel)
        self._until(flag, 0, f"rank {g} to take the previous flag {channel}")
        flag.fill_(1)

    def wait(self, g: int, channel: int) -> None:
        flag = self._flag(dist.get_rank(), channel, me=g)
        self._until(flag, 1, f"flag {channel} from rank {g}")
        flag.fill_(0)

    def _until(self, flag: torch.Tensor, value: int, what: str) -> None:
        from tessel_dsl.executor.comm import CommTimeout

        end = time.monotonic() + self.timeout
        while int(flag.item()) != value:
            if time.monotonic() > end:
                raise CommTimeout(f"no {what} within {self.timeout:g}s")
            time.sleep(0.0002)

    def submit(self, peer: int, fn, tensors) -> None:
        w = self.workers.get(peer)
        if w is None:
            w = self.workers[peer] = _Worker()
        w.jobs.put(fn)

    def flush(self) -> None:
        for w in self.workers.values():
            w.jobs.join()
            if w.error is not None:
                raise w.error


class _Worker:
    """One link's sends, in order, off the main thread (the CPU's side stream)."""

    def __init__(self) -> None:
        self.jobs: queue.Queue = queue.Queue()
        self.error: BaseException | None = None
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            fn = self.jobs.get()
            try:
                if self.error is None:
                    fn()
            except BaseException as e:  # reported at the next flush, on the main thread
                self.error = e
            finally:
                self.jobs.task_done()
