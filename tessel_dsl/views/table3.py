"""The Tessel paper's Table 3 (steady-state bubble rate of training schedules), from `specs/`.

Rows are models; 1F1B runs on the V-shape split of the model, Chimera-direct on the X-shape split,
1F1B+ and Tessel on the model's own placement (GPT: M-shape, mT5: NN-shape, Flava: K-shape). The
shipped specs give every device the same work per micro-batch, so the V- and X-shape splits are
the same for all three models. Each cell is the bubble "considering numerous micro-batches": the
idle fraction within one steady-state period (see `compare`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tessel_dsl.search.baselines.chain import unfolded
from tessel_dsl.search.baselines.compare import Row, baseline_row, tessel_row

MODELS = (("GPT", "mshape"), ("mT5", "nnshape"), ("Flava", "kshape"))
COLUMNS = ("1f1b", "chimera", "1f1b+", "tessel")
COLUMN_TITLES = {"1f1b": "1F1B (V)", "chimera": "Chimera-direct (X)", "1f1b+": "1F1B+", "tessel": "Tessel"}
# Table 3 of the paper, in percent; None is the paper's 'x' (no adaptation to the placement).
PAPER: dict[str, tuple[float | None, ...]] = {
    "GPT": (0.0, 20.0, 25.0, 0.0),
    "mT5": (0.0, 20.0, 20.0, 0.0),
    "Flava": (0.0, 20.0, None, 0.0),
}


@dataclass(frozen=True)
class Table3Row:
    """One model: the measured cells (a Row per column) and the paper's numbers."""

    model: str
    placement: str
    cells: tuple[Row, ...]
    paper: tuple[float | None, ...]


def table3(spec_dir: str | Path = "specs", *, microbatches: int = 16, solver: str = "auto",
           time_limit: float | None = 120.0, devices: int | None = None, tessel: bool = True) -> list[Table3Row]:
    """Measure Table 3 from `spec_dir`'s vshape, xshape, mshape, nnshape and kshape specs (train).

    `tessel=False` leaves the Tessel column out (status n/a), e.g. for a quick look at baselines.
    """
    from tessel_dsl.lang.parser import parse_file

    sets = {"D": str(devices)} if devices else None

    def load(name: str):
        return parse_file(Path(spec_dir) / f"{name}.tsl", sets=sets, mode="train")

    v_row, _ = baseline_row(load("vshape"), "1f1b", microbatches)
    x_row, _ = baseline_row(load("xshape"), "chimera", microbatches)
    out = []
    for model, placement in MODELS:
        spec = load(placement)
        # The paper's 1F1B+ takes the placement as written (its 'x' for Flava's towers), not as
        # `compare` adapts it (`branches.py`), so the column is the paper's schedule.
        with unfolded():
            plus, _ = baseline_row(spec, "1f1b+", microbatches)
        if tessel:
            ours, _ = tessel_row(spec, microbatches, solver=solver, time_limit=time_limit)
        else:
            ours = Row(spec=spec.name, schedule="tessel", status="n/a", reason="not searched")
        out.append(Table3Row(model, placement, (v_row, x_row, plus, ours), PAPER[model]))
    return out
