"""A chain model whose block on one rank raises or hangs, for the executor's failure tests."""
from __future__ import annotations

import time

from tessel_dsl.executor.models import chain


def factory(ctx, fail_rank: int = 1, fail_block: str = "F1", how: str = "raise", **kw):
    stage = chain.factory(ctx, **kw)
    if ctx.rank == fail_rank and fail_block in stage.modules:
        inner = stage.modules[fail_block]
        original = inner.forward

        def broken(*args):
            if how == "raise":
                raise ValueError("boom in the user's block")
            if how == "kill":  # the process vanishes without a word, as under the OOM killer
                import os
                import signal

                os.kill(os.getpid(), signal.SIGKILL)
            time.sleep(3600)
            return original(*args)

        inner.forward = broken
    return stage


def broken_factory(ctx, **kw):
    raise RuntimeError("cannot build this model")
