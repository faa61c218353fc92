"""pytest plugin: `.tsl` specs with ``expect`` lines become test items, one per expectation.

    pytest specs/                 # every spec with expectations (not those under invalid/)
    pytest specs/gpt_mshape.tsl   # a named spec is always collected

A spec is searched and simulated once per micro-batch count its expectations mention; a failing
expectation reads like a failed assertion: the expectation as written, where it is, what was
measured. Registered through the ``pytest11`` entry point, so installing the package enables it;
it imports nothing heavy until a spec is actually collected.
"""
from __future__ import annotations

from pathlib import Path

import pytest


def pytest_addoption(parser) -> None:
    group = parser.getgroup("tessel", "Tessel DSL spec checks")
    group.addoption("--tessel-blocking", action="store_true", default=False,
                    help="check .tsl expectations with blocking send/recv programs")
    parser.addini("tessel_skip_dirs", "directory names whose .tsl files are never collected "
                  "unless named explicitly", type="linelist", default=["invalid"])


def pytest_collect_file(file_path: Path, parent):
    if file_path.suffix != ".tsl":
        return None
    explicit = parent.session.isinitpath(file_path)
    if not explicit:
        from tessel_dsl.tools.expect import has_expectations

        skip = set(parent.config.getini("tessel_skip_dirs"))
        if skip.intersection(file_path.parent.parts):
            return None
        try:
            if not has_expectations(file_path.read_text()):
                return None
        except OSError:
            return None
    return TslFile.from_parent(parent, path=file_path)


class TslFile(pytest.File):
    """One spec file; its items share one search + simulation per micro-batch count."""

    def collect(self):
        from tessel_dsl.errors import TesselError
        from tessel_dsl.lang.parser import parse_file
        from tessel_dsl.tools.expect import describe

        try:
            spec = parse_file(self.path)
        except TesselError as e:
            yield TslLoadError.from_parent(self, name="load", error=str(e))
            return
        self.spec = spec
        self._runs: dict[int, object] = {}
        if not spec.expectations:
            yield TslLoadError.from_parent(self, name="load", error="the spec declares no expectations")
            return
        seen: dict[str, int] = {}
        for e in spec.expectations:
            name = describe(e)
            seen[name] = seen.get(name, 0) + 1
            if seen[name] > 1:
                name += f" #{seen[name]}"
            yield TslExpectation.from_parent(self, name=name, expectation=e)

    def run_for(self, n: int):
        """(plan, report) for `n` micro-batches, or the TesselError that prevented it."""
        if n not in self._runs:
            from tessel_dsl.errors import TesselError
            from tessel_dsl.simulator import simulate
            from tessel_dsl.tools.expect import plan_for

            try:
                plan = plan_for(self.spec, n, blocking=self.config.getoption("tessel_blocking"))
                self._runs[n] = (plan, simulate(plan))
            except TesselError as e:
                self._runs[n] = e
        return self._runs[n]


class TslExpectationFailed(Exception):
    """Raised by an item whose expectation does not hold; rendered by `repr_failure`."""


class TslExpectation(pytest.Item):
    """One ``expect`` line of a spec."""

    def __init__(self, *, expectation, **kwargs):
        super().__init__(**kwargs)
        self.expectation = expectation

    def runtest(self) -> None:
        from tessel_dsl.tools.expect import judge

        spec = self.parent.spec
        n = self.expectation.microbatches or spec.microbatches
        run = self.parent.run_for(n)
        if isinstance(run, Exception):
            raise TslExpectationFailed(f"could not build a plan for N={n}: {run}")
        plan, report = run
        outcome = judge(spec, self.expectation, n, report, plan)
        if not outcome.passed:
            raise TslExpectationFailed(outcome.detail)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, TslExpectationFailed):
            loc = self.expectation.span
            where = f"{loc}: " if loc is not None else f"{self.path}: "
            return f"{where}expect {self.name}\n  {excinfo.value}"
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        loc = self.expectation.span
        line = loc.line - 1 if loc is not None else None
        return self.path, line, f"expect {self.name}"


class TslLoadError(pytest.Item):
    """A collected spec that does not parse (or checks nothing): fails with the spec error."""

    def __init__(self, *, error: str, **kwargs):
        super().__init__(**kwargs)
        self.error = error

    def runtest(self) -> None:
        raise TslExpectationFailed(self.error)

    def repr_failure(self, excinfo, style=None):
        if isinstance(excinfo.value, TslExpectationFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo, style=style)

    def reportinfo(self):
        return self.path, None, f"{self.path.name}: load"
