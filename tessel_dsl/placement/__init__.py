"""From a model to its plan: profile the units a stage boundary may fall between, generate the
candidate placements as `.tsl` specs with costs, search every one and keep the shortest that fits.

`plan_model(model, example_batch, devices=..., memory=...)` is the whole path (`tessel plan` on
the command line); `profile_model`, `candidates` and `choose` are its steps.
"""
from __future__ import annotations

__all__ = ["candidates", "choose", "plan_model", "profile_model", "tp_plans"]


def __getattr__(name: str):
    # torch is imported only by the steps that need it
    if name == "profile_model":
        from tessel_dsl.placement.profile import profile_model
        return profile_model
    if name == "candidates":
        from tessel_dsl.placement.candidates import candidates
        return candidates
    if name == "choose":
        from tessel_dsl.placement.choose import choose
        return choose
    if name == "plan_model":
        from tessel_dsl.placement.api import plan_model
        return plan_model
    if name == "tp_plans":
        from tessel_dsl.placement.tp import tp_plans
        return tp_plans
    raise AttributeError(name)
