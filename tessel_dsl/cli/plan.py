"""`tessel plan`: from a model to its plan -- profile, candidate placements, search, choice."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from tessel_dsl.cli.app import app, err_console


def _batch_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(x) for x in text.lower().replace(",", "x").split("x"))
    except ValueError:
        shape = ()
    if not shape or min(shape) < 1:
        raise typer.BadParameter(f"expected sizes such as 2x128, got {text!r}", param_hint="--batch-shape")
    return shape


def example_batch(model, shape: tuple[int, ...]):
    """Token ids of `shape` below the model's vocabulary (`config.vocab_size`, else 2)."""
    import torch

    vocab = getattr(getattr(model, "config", None), "vocab_size", None) or 2
    return torch.randint(0, vocab, shape, generator=torch.Generator().manual_seed(0))


@app.command()
def plan(
    model: Optional[str] = typer.Option(None, "--model", "-m", metavar="MODULE:FACTORY",
                                        help="A function returning the `nn.Module` (e.g. a Hugging Face "
                                             "`LlamaForCausalLM` built from its config)."),
    profile: Optional[Path] = typer.Option(None, "--profile", metavar="FILE",
                                           help="Plan from a saved profile (the `<plan>.profile.json` a run wrote, "
                                                "e.g. on a GPU machine) instead of profiling --model."),
    devices: int = typer.Option(..., "--devices", "-d", min=1, metavar="D", help="Pipeline devices."),
    memory: str = typer.Option("80GB", "--memory", metavar="SIZE",
                               help="Memory per device, e.g. 80GB; --reserve is taken off it first."),
    reserve: str = typer.Option("0", "--reserve", metavar="SIZE",
                                help="Memory per device taken before training (CUDA context, buffers), e.g. 4GB."),
    microbatches: Optional[int] = typer.Option(None, "--microbatches", "-n", min=1, metavar="N",
                                               help="Micro-batches per iteration (default: 4 x devices)."),
    batch_shape: str = typer.Option("1x128", "--batch-shape", metavar="BxT",
                                    help="One micro-batch of token ids to profile with, e.g. 2x128 (ids below "
                                         "`config.vocab_size`)."),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", "--budget", min=0.01, metavar="S",
                                               help="Wall-clock seconds for all the searches together, shared "
                                                    "evenly (`--budget` is its former name). Without it every "
                                                    "solve inside a search stops at its own deterministic budget, "
                                                    "so the same profile and options give the same plan, byte for "
                                                    "byte but the search's seconds, on a busy machine or an idle "
                                                    "one; a memory-bound search can then take minutes. With it "
                                                    "the plan may differ from run to run."),
    effort: float = typer.Option(0.0, "--effort", min=0.0, metavar="E",
                                 help="Each candidate's search re-solves its whole schedule on E more units of "
                                      "deterministic solver budget (`tessel search --effort`; about E to 2E seconds of "
                                      "CPU per candidate, and tens of seconds more where it also tries "
                                      "two-micro-batch repetends). Default 0: the searches alone."),
    device: Optional[str] = typer.Option(None, "--device", metavar="cpu|cuda|cuda:N",
                                         help="Where to profile (default: the GPU when there is one)."),
    repeats: int = typer.Option(5, "--repeats", min=1, metavar="R", help="Timed runs per unit; the median is kept."),
    link_bandwidth: Optional[str] = typer.Option(None, "--link-bandwidth", metavar="SIZE",
                                                 help="Bytes per second a device sends at, for a spread block's "
                                                      "collectives, e.g. 300GB (default: 300GB on a GPU, 2GB on "
                                                      "the CPU)."),
    link_latency: Optional[float] = typer.Option(None, "--link-latency", min=0.0, metavar="S",
                                                 help="Seconds per message or collective step, for a spread "
                                                      "block's collectives (default: 20e-6 on a GPU, 100e-6 on "
                                                      "the CPU)."),
    spread_overhead: Optional[float] = typer.Option(None, "--spread-overhead", min=0.0, metavar="S",
                                                    help="Seconds a block spread over devices takes per "
                                                         "micro-batch, forward and backward each, beyond compute "
                                                         "and collectives: the rendezvous of every device at it "
                                                         "(default 0, or what --from-run measured)."),
    from_run: Optional[list[Path]] = typer.Option(None, "--from-run", metavar="REPORT",
                                                  help="A run report of a plan `tessel plan` wrote (`tessel run "
                                                       "--json`, a Pipeline run's summary): that candidate is "
                                                       "costed with the block times it measured and searched again, "
                                                       "and the spread overhead it measured (its iteration beyond "
                                                       "its replay, per spread block run) is used unless "
                                                       "--spread-overhead is given. Repeat it with the runs of each "
                                                       "candidate tried (a later run of one replaces an earlier; "
                                                       "the largest spread overhead is used)."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", metavar="PATH",
                                          help="The plan to write (default: `plan.json` here); its spec (.tsl), "
                                               "binding (.blocks.json) and profile (.profile.json) go beside it."),
    as_json: bool = typer.Option(False, "--json", help="Print the table, the choice and the files as JSON."),
) -> None:
    """Profile a model, generate candidate placements, search each against the baselines and write
    the shortest plan that fits memory, with its spec and block binding."""
    from tessel_dsl.executor.model_api import load_factory
    from tessel_dsl.placement.api import plan_model, table_lines

    shape = _batch_shape(batch_shape)
    if (model is None) == (profile is None):
        raise typer.BadParameter("give --model to profile, or --profile to plan from a saved profile",
                                 param_hint="--model")
    saved = None
    if profile is not None:
        from tessel_dsl.placement.costs import Profile

        saved = Profile.from_json(json.loads(profile.read_text()))
        net, batch = None, None
    else:
        net = load_factory(model)()
        batch = example_batch(net, shape)
    reports = []
    for path in from_run or ():
        try:
            reports.append(json.loads(path.read_text()))
        except (OSError, ValueError) as e:
            raise typer.BadParameter(f"cannot read {path}: {e}", param_hint="--from-run") from None
    say = None if as_json else (lambda m: err_console.print(f"[dim]{m}[/]", highlight=False))
    res = plan_model(net, batch, devices=devices, memory=memory, reserve=reserve, microbatches=microbatches,
                     time_limit=time_limit, output=output or Path("plan.json"), device=device, repeats=repeats,
                     profile=saved, progress=say, link_bandwidth=link_bandwidth, link_latency=link_latency,
                     spread_overhead=spread_overhead, from_run=reports or None, effort=effort)
    files = {k: str(v) for k, v in res.files.items()}
    if as_json:
        rows = [{"candidate": r.candidate, "schedule": r.schedule, "ms": r.ms, "gb_per_device": list(r.gb),
                 "fits": r.fits, "reason": r.reason} for r in res.outcome.rows]
        typer.echo(json.dumps({"device": res.profile.device, "profile_seconds": res.profile.seconds,
                               "rows": rows, "chosen": {"candidate": res.best.candidate,
                                                        "schedule": res.best.schedule},
                               "why": res.outcome.why, "spread_overhead_s": res.spread_overhead,
                               "from_runs": [{"candidate": r.candidate, "measured_s": r.measured_s,
                                              "replayed_s": r.replayed_s} for r in res.runs],
                               "files": files}, indent=1))
        return
    # plain lines: the table and the Pipeline call are meant to be copied, never wrapped
    typer.echo(f"profiled {len(res.profile.units)} units on {res.profile.device} in "
               f"{res.profile.seconds:.1f}s; {res.plan.schedule.microbatches} micro-batches per iteration")
    for path, run in zip(from_run or (), res.runs):
        typer.echo(f"{run.candidate}: costed with the block times {path} measured (iteration "
                   f"{run.measured_s * 1e3:.1f} ms, replayed {run.replayed_s * 1e3:.1f} ms)")
    if res.spread_overhead:
        typer.echo(f"spread blocks costed {res.spread_overhead * 1e3:.3g} ms longer each way per micro-batch "
                   f"(spread overhead)")
    typer.echo("\n".join(table_lines(res.outcome)))
    typer.echo(f"chosen: {res.outcome.why}")
    for note in res.outcome.candidate.notes:
        typer.echo(f"note: {note}")
    typer.echo(f"wrote {files['plan']}, {files['spec']}, {files['blocks']}; train with "
               f"Pipeline({files['plan']!r}, model, loss_fn)  (the binding {files['blocks']} is read from beside it)")
