"""OR-Tools' CP-SAT Python module, imported for the `tessel` command without pandas.

``ortools.sat.python.cp_model`` imports pandas at load time, only for its ``*_series`` helpers
(model building over pandas indexes), which Tessel never calls. Of the 0.45 s of CPU the import
costs, pandas is 0.27 s, paid again by every `tessel search`. The command line (and nothing
else: a program that imports `tessel_dsl` may use those helpers itself) turns `lean` on; then, if
nothing has loaded pandas yet, CP-SAT is imported against a stand-in holding the two types its
module body names, and the stand-in is dropped from ``sys.modules`` right after, so a later
``import pandas`` still gets the real one. If the import fails that way (another OR-Tools
release), it is done the ordinary way.
"""
from __future__ import annotations

import sys
import types

lean = False  # set by `tessel_dsl.cli.main`


def cp_model():
    """The ``ortools.sat.python.cp_model`` module."""
    name = "ortools.sat.python.cp_model"
    if name in sys.modules or not lean or "pandas" in sys.modules:
        from ortools.sat.python import cp_model as module

        return module
    stand_in = types.ModuleType("pandas")
    stand_in.Index = type("Index", (), {})
    stand_in.Series = type("Series", (), {})
    sys.modules["pandas"] = stand_in
    try:
        from ortools.sat.python import cp_model as module
    except Exception:  # noqa: BLE001 -- any failure: forget the partial import, do it the usual way
        for key in [k for k in sys.modules if k == name or k.startswith(name + ".")]:
            del sys.modules[key]
        module = None
    finally:
        if sys.modules.get("pandas") is stand_in:
            del sys.modules["pandas"]
    if module is None:
        from ortools.sat.python import cp_model as module
    return module
