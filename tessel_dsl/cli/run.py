"""`tessel run`: execute a plan (or a spec, searched first) on this host's devices and compare the
measured timeline with the plan replayed from the measured block times."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from tessel_dsl.cli.app import app, console, err_console, parse_sets


def _plan_for(target: Path, set_: list[str] | None, microbatches: Optional[int], blocking: Optional[bool]):
    """A plan from a .tsl spec (parsed and searched here) or a plan file.

    A plan file runs its own programs. They are lowered again only when asked: `blocking` given and
    different from how the plan was lowered, or a new micro-batch count (re-extended exactly as
    `tessel simulate -n` does, `finish.replan`, and lowered in the plan's own mode unless `blocking`
    says otherwise). A plan without programs needs the mode.
    """
    from tessel_dsl.plan import Plan, load_plan, make_plan

    if target.suffix == ".tsl":
        from tessel_dsl.lang.parser import parse_file
        from tessel_dsl.search.driver import search

        spec = parse_file(target, sets=parse_sets(set_) or None)
        result = search(spec, microbatches=microbatches)
        return make_plan(spec, result.schedule, result.info, blocking=bool(blocking))
    plan = load_plan(target)
    sched = plan.schedule
    if not plan.programs and blocking is None:
        raise typer.BadParameter(f"{target} holds no programs; pass --blocking or --non-blocking to lower its "
                                 "schedule", param_hint="--blocking/--non-blocking")
    have = plan.programs[0].blocking if plan.programs else None
    want = have if blocking is None else blocking
    if microbatches is not None and microbatches != sched.microbatches:
        from tessel_dsl.search.finish import replan

        # The same re-extension as `tessel simulate -n`, so the run is the schedule it showed.
        err_console.print(f"re-extending {sched.name} to N={microbatches} and lowering it "
                          f"{'blocking' if want else 'non-blocking'}", highlight=False)
        return replan(plan, microbatches, blocking=want)
    if want != have:
        from tessel_dsl.lower import lower

        err_console.print(f"lowering {plan.schedule.name} again, {'blocking' if want else 'non-blocking'} (as asked)",
                          highlight=False)
        plan = Plan(plan.spec, sched, lower(plan.spec, sched, blocking=want), plan.search,
                    sched.peak_memory(plan.spec))
    return plan


@app.command()
def run(
    target: Path = typer.Argument(..., help="a plan.json, or a .tsl spec to search first"),
    model: str = typer.Option(..., "--model", metavar="MODULE:FACTORY",
                              help="The function `factory(ctx, **model_args)` that builds a rank's blocks, called once per rank."),
    model_arg: Optional[list[str]] = typer.Option(None, "--model-arg", metavar="K=V",
                                                  help="Sizes for the factory, passed to it as keywords (repeatable)."),
    nproc: Optional[int] = typer.Option(None, "--nproc", metavar="P",
                                        help="Ranks to start: the plan's devices x replicas, which is also the "
                                             "default."),
    replicas: int = typer.Option(1, "--replicas", min=1, metavar="R",
                                 help="R data-parallel copies of the plan on R x D ranks, replica k on micro-batches "
                                      "`k*N .. k*N+N-1`, gradients averaged after each iteration; the report is "
                                      "replica 0's."),
    backend: Optional[str] = typer.Option(None, "--backend", metavar="gloo|nccl",
                                          help="Communication backend (default: nccl when there are enough GPUs)."),
    blocking: Optional[bool] = typer.Option(None, "--blocking/--non-blocking",
                                            help="Send/recv mode. A plan file runs the programs it holds, in the mode "
                                                 "it was lowered in; naming the other mode lowers its schedule again "
                                                 "in that mode, and says so; a plan without programs needs one of the "
                                                 "two."),
    microbatches: Optional[int] = typer.Option(None, "--microbatches", "-n", metavar="N",
                                               help="Micro-batches per iteration: re-extends a plan exactly as "
                                                    "`tessel simulate -n` does (the schedule it shows) and lowers it "
                                                    "in the plan's mode, or searches a spec for N."),
    steps: int = typer.Option(3, "--steps", metavar="K", help="Measured iterations."),
    warmup: int = typer.Option(1, "--warmup", metavar="K", help="Unmeasured iterations first."),
    timeout: float = typer.Option(120.0, "--timeout", metavar="S", help="Seconds without progress before the run fails."),
    set_: Optional[list[str]] = typer.Option(None, "--set", metavar="K=V",
                                             help="Override a spec parameter (a .tsl target only; repeatable)."),
    trace: Optional[Path] = typer.Option(None, "--trace", metavar="FILE",
                                         help="Write a Chrome/Perfetto trace of the measured median iteration here."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as JSON."),
) -> None:
    """Run a plan on real devices: one process per device, NCCL on GPUs, gloo on CPUs."""
    import tessel_dsl.executor as executor
    from tessel_dsl.executor.models.common import parse_model_args
    from tessel_dsl.executor.trace import write_trace

    if backend not in (None, "gloo", "nccl"):
        raise typer.BadParameter("use gloo or nccl", param_hint="--backend")
    try:
        args = parse_model_args(model_arg)
    except ValueError as e:
        raise typer.BadParameter(str(e), param_hint="--model-arg") from None
    plan = _plan_for(target, set_, microbatches, blocking)
    if not as_json:
        err_console.print(f"running {plan.spec.name} ({plan.schedule.name}, N={plan.schedule.microbatches}) "
                          f"on {plan.spec.devices} ranks ...")
    report = executor.run(plan, model, nproc=nproc, backend=backend, timeout=timeout, steps=steps, warmup=warmup,
                          collect=True, model_args=args, replicas=replicas)
    summary = report.summary()
    if trace is not None:
        write_trace(trace, report.timelines[report.median_index()], plan.spec.name)
    if as_json:
        console.print_json(json.dumps(summary))
        return
    render(summary)


def render(s: dict) -> None:
    """Measured vs simulated table, one row per device."""
    from rich.table import Table

    m, sim = s["measured"], s["simulated"]
    mode = "blocking" if s["blocking"] else "non-blocking"
    table = Table(title=f"tessel run: {s['plan']} ({s['schedule']}, {mode}) on {s['devices']} x {s['device']}, "
                        f"N={s['microbatches']}", title_justify="left")
    for col in ("device", "busy ms", "wait ms (measured)", "wait ms (simulated)", "wait share", "simulated share"):
        table.add_column(col, justify="right")
    for d in range(s["devices"]):
        table.add_row(f"dev{d}", f"{m['busy'][d] * 1e3:.2f}", f"{m['wait'][d] * 1e3:.2f}", f"{sim['wait'][d] * 1e3:.2f}",
                      f"{s['wait_share_measured'][d]:.1%}", f"{s['wait_share_simulated'][d]:.1%}")
    console.print(table)
    console.print(f"iteration: measured {m['iteration'] * 1e3:.2f} ms, simulated {sim['iteration'] * 1e3:.2f} ms; "
                  f"throughput {s['throughput_mb_per_s']:.2f} micro-batches/s"
                  + (f"; loss {s['loss']:.6f}" if s.get("loss") is not None else ""))
    if s.get("transport") == "copy":
        console.print("messages moved through the copy links (TESSEL_TRANSPORT): "
                      + ("their shared-memory stand-in on the CPU" if s.get("backend") == "gloo"
                         else "the GPUs' copy engines; `nccl` keeps NCCL's send and receive"))
    if s.get("block_seconds"):
        # What the simulated column charged each block; `tessel profile --from-run` turns these
        # into a spec's costs.
        blocks = ", ".join(f"{b} {t * 1e3:.2f}" for b, t in sorted(s["block_seconds"].items()))
        console.print(f"block times (median ms): {blocks}", highlight=False)
