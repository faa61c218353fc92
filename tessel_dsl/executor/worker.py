"""Entry point of one spawned rank: ``python -m tessel_dsl.executor.worker JOB_DIR RANK`` (see launch.spawn)."""
from __future__ import annotations

import pickle
import sys
from pathlib import Path

from tessel_dsl.executor.rank import Channel, rank_main


def main() -> None:
    job, rank = Path(sys.argv[1]), int(sys.argv[2])
    plan_json, opts, world, init = pickle.loads((job / "job").read_bytes())
    rank_main(rank, world, plan_json, opts, init, Channel(job, rank, world))


if __name__ == "__main__":
    main()
