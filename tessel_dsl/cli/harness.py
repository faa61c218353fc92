"""`tessel test`: check every spec's expectations (search, simulate, compare) and gate CI."""
from __future__ import annotations

import time
from pathlib import Path
from typing import Optional
from xml.sax.saxutils import escape, quoteattr

import typer

from tessel_dsl.cli.app import app, console, err_console, parse_sets
from tessel_dsl.errors import TesselError


def junit_xml(results: list[tuple[str, object]], errors: list[tuple[str, str]], seconds: float) -> str:
    """JUnit XML: one testcase per expectation, one erroring testcase per spec that did not load."""
    cases = []
    failures = 0
    for spec_name, o in results:
        name = quoteattr(o.text)
        cls = quoteattr(spec_name)
        if o.passed:
            cases.append(f'  <testcase classname={cls} name={name}/>')
        else:
            failures += 1
            cases.append(f'  <testcase classname={cls} name={name}>\n'
                         f'   <failure message={quoteattr(o.detail)}>{escape(o.detail)}</failure>\n'
                         '  </testcase>')
    for spec_name, msg in errors:
        cases.append(f'  <testcase classname={quoteattr(spec_name)} name="load">\n'
                     f'   <error message={quoteattr(msg.splitlines()[0] if msg else "error")}>{escape(msg)}</error>\n'
                     '  </testcase>')
    total = len(results) + len(errors)
    head = (f'<?xml version="1.0" encoding="utf-8"?>\n<testsuite name="tessel" tests="{total}" '
            f'failures="{failures}" errors="{len(errors)}" time="{seconds:.3f}">')
    return "\n".join([head, *cases, "</testsuite>"]) + "\n"


@app.command("test")
def test_specs(
    paths: list[Path] = typer.Argument(..., help="Spec files or directories (directories: .tsl files with `expect`)."),
    junit: Optional[Path] = typer.Option(None, "--junit", help="Also write the results as JUnit XML here."),
    blocking: bool = typer.Option(False, "--blocking", help="Lower with blocking send/recv."),
    sets: Optional[list[str]] = typer.Option(None, "--set", help="Override a spec parameter: --set K=V."),
    mode: Optional[str] = typer.Option(None, "--mode", help="train or infer."),
    time_limit: Optional[float] = typer.Option(None, "--time-limit", min=0.0,
                                               help="Seconds per search (best schedule found so far)."),
) -> None:
    """Search, simulate and check every expectation of the given specs; exit 1 if any fails."""
    from rich.markup import escape as mescape
    from rich.table import Table

    from tessel_dsl.fileio import write_text_atomic
    from tessel_dsl.lang.parser import parse_file
    from tessel_dsl.tools.expect import check_expectations, describe, format_value, spec_files

    if mode is not None and mode not in ("train", "infer"):
        raise typer.BadParameter(f"expected train or infer, got {mode!r}", param_hint="--mode")
    overrides = parse_sets(sets)
    files = spec_files(paths)
    if not files:
        raise TesselError("no spec with expectations found in " + ", ".join(map(str, paths)))
    t0 = time.perf_counter()
    results: list[tuple[str, object]] = []
    errors: list[tuple[str, str]] = []
    first: str | None = None  # the first failure, for the last line
    table = Table(title="expectations", title_justify="left", header_style="bold")
    for col, just in (("spec", "left"), ("expectation", "left"), ("measured", "right"),
                      ("target", "right"), ("result", "left")):
        table.add_column(col, justify=just)
    for f in files:
        try:
            spec = parse_file(f, sets=overrides or None, mode=mode)
        except TesselError as e:
            errors.append((str(f), str(e)))
            table.add_row(str(f), "[red](spec does not load)[/]", "", "", "[bold red]ERROR[/]")
            continue
        if not spec.expectations:
            table.add_row(str(f), "[dim](no expectations)[/]", "", "", "[dim]skip[/]")
            continue
        with err_console.status(f"checking {f}..."):
            outcomes = check_expectations(spec, blocking=blocking, time_limit=time_limit)
        for o in outcomes:
            results.append((str(f), o))
            verdict = "[green]pass[/]" if o.passed else f"[bold red]FAIL[/] {mescape(o.detail)}"
            # Times and memory in the spec's declared units (``6 ms``); bare numbers without them.
            metric = o.expectation.metric
            target = format_value(metric, o.target, spec.units) if o.target is not None else ""
            text = describe(o.expectation, o.microbatches, spec.units)
            if not o.passed and first is None:
                first = f"{f}: {text}: {o.detail}"
            table.add_row(str(f), mescape(text),
                          format_value(metric, o.measured, spec.units), target, verdict)
    seconds = time.perf_counter() - t0
    console.print(table)
    for name, msg in errors:
        err_console.print(f"[bold red]{mescape(name)}:[/] {mescape(msg)}", highlight=False)
    failed = sum(1 for _, o in results if not o.passed)
    passed = len(results) - failed
    summary = f"{passed} passed, {failed} failed"
    if errors:
        summary += f", {len(errors)} spec(s) did not load"
    console.print(f"[bold]{summary}[/] in {seconds:.1f}s", highlight=False)
    if junit is not None:
        write_text_atomic(junit, junit_xml(results, errors, seconds))
        err_console.print(f"wrote {junit}", highlight=False)
    if failed or errors:
        err_console.print(f"[bold red]FAIL:[/] {mescape(first or errors[0][0] + ' does not load')}",
                          highlight=False)
        raise typer.Exit(1)
