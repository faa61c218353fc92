"""`profile_spec`: measure a model's blocks and write the spec with measured costs.

It joins three layers (the language reads the spec, the executor measures, the interop layer writes
`.tsl`), so it lives here at the top rather than in any one of them.
"""
from __future__ import annotations

from tessel_dsl.interop.profiled_spec import Measurement
from tessel_dsl.ir import Spec

__all__ = ["profile_spec"]


def profile_spec(spec, model, *, device=None, repeats: int = 10, warmup: int = 3, model_args: dict | None = None,
                 time_resolution: float | None = None, capacity_bytes: int | None = None,
                 output=None) -> tuple[Spec, list[Measurement]]:
    """Measure `model`'s blocks for `spec` (a Spec or a .tsl path) and return the profiled spec.

    `model` is ``"package.module:factory"`` or the factory itself (see `tessel_dsl.executor.model_api`).
    With `output`, the profiled spec is also written there as `.tsl` (atomically).
    """
    from tessel_dsl.executor.measure import measure
    from tessel_dsl.interop.profiled_spec import apply_measurements, spec_to_tsl

    if not isinstance(spec, Spec):
        from tessel_dsl.lang.parser import parse_file

        spec = parse_file(spec)
    found = measure(spec, model, device=device, repeats=repeats, warmup=warmup, model_args=model_args)
    new = apply_measurements(spec, found, time_resolution=time_resolution, capacity_bytes=capacity_bytes)
    if output is not None:
        from tessel_dsl.fileio import write_text_atomic

        write_text_atomic(output, spec_to_tsl(new, f"{spec.name}, with costs measured by `tessel profile`"))
    return new, found
