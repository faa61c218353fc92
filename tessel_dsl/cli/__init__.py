"""`tessel` command line: a thin layer over the library; each verb lives in its own module.

Heavy libraries (z3, ortools, simpy, torch) are imported inside the verbs that need them, so
`tessel check` starts fast and never needs them.
"""
from __future__ import annotations

import importlib
import os
import sys

from tessel_dsl.cli.app import app, err_console
from tessel_dsl.errors import TesselError

# Verb modules register their commands on `app` when imported.
_VERBS = ("check", "search", "compare", "simulate", "harness", "run", "export", "profile", "plan")
# The command each module registers, where its name differs from the module's.
_COMMANDS = {"test": "harness", "import": "export"}


def _verb_module(argv: list[str]) -> str | None:
    """The module of the verb `argv` runs (its first word), or None when it names none (help, a
    typo): then every verb is loaded, so help lists them all and a typo gets Click's message."""
    word = next((a for a in argv if not a.startswith("-")), None)
    if word is None or argv.index(word) != 0:
        return None
    name = _COMMANDS.get(word, word)
    return name if name in _VERBS else None


def _load_verbs(argv: list[str] | None = None) -> None:
    """Import the verb modules; with `argv`, only the one it runs (each verb pulls in its own
    layers, and a command should pay only for its own: `tessel search` skips the simulator, the
    harness and the baselines table)."""
    only = None if argv is None else _verb_module(argv)
    for name in _VERBS if only is None else (only,):
        try:
            importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise


# Verbs that start no other process: their numpy (loaded with OR-Tools) may keep one BLAS thread.
_ONE_BLAS_THREAD = frozenset({"check", "search", "compare", "simulate", "export"})
# What OpenBLAS reads for its thread count, first found wins; any of them is the user's choice.
_BLAS_THREAD_VARS = ("OPENBLAS_NUM_THREADS", "GOTO_NUM_THREADS", "OMP_NUM_THREADS")


def one_blas_thread(argv: list[str], environ) -> bool:
    """Set OPENBLAS_NUM_THREADS=1 in `environ` for a verb of `_ONE_BLAS_THREAD`, unless the user
    has set a thread count; True when it did.

    numpy comes with OR-Tools' CP-SAT, and its OpenBLAS starts a thread per core on load (0.05 s
    of CPU on 2 cores, more on larger machines) for linear algebra the search never does. The
    variable must be set before numpy loads; verbs that launch processes (`run`, `profile`,
    `test`) are left alone, so their workers get the user's environment unchanged.
    """
    if _verb_module(argv) not in _ONE_BLAS_THREAD or any(v in environ for v in _BLAS_THREAD_VARS):
        return False
    environ["OPENBLAS_NUM_THREADS"] = "1"
    return True


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point: user errors print in red and exit 1, usage errors exit 2."""
    from tessel_dsl.search.solvers import cpsat_module

    if argv is None and "numpy" not in sys.modules:
        # the command-line process itself (not `main([...])` called from a program or a test)
        one_blas_thread(sys.argv[1:], os.environ)
    cpsat_module.lean = True  # no pandas for OR-Tools in this process (cpsat_module says why)
    _load_verbs(sys.argv[1:] if argv is None else argv)
    try:
        app(args=argv, prog_name="tessel")
    except TesselError as e:
        from rich.markup import escape

        err_console.print(f"[bold red]error:[/] {escape(str(e))}", highlight=False)
        sys.exit(1)
    except KeyboardInterrupt:
        err_console.print("[red]interrupted[/]")
        sys.exit(130)
