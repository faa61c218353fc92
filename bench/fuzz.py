"""Fuzzing benchmark: generated and mutated specs, mutated plans, each under a time limit.

    python bench/fuzz.py --specs 10000 --plans 1000          # the table in bench/results/fuzz.md
    python bench/fuzz.py --specs 200 --plans 100 --json      # what tests/integration/test_fuzz_bench.py runs
    python bench/fuzz.py --scaling                           # CPU time of checking 8k-100k blocks
    python bench/fuzz.py --scaling explicit                  # ... of the explicit-lines spec only

Every input is generated from (seed, index) alone, so a reported index reproduces with
``--only spec:INDEX`` (or ``plan:INDEX``), which prints the input and what happened.

Specs come from a generator of this file's own (random headers, blocks, options, loops, shapes,
includes, extreme numbers, ``--set`` values; per-device memory, reserves and memory sums,
resolutions, quantities a hair off their resolution, parameters defined by themselves, quantities
beyond the limits plans are held to, chains over thousands of undefined names, long files of
plain block lines, very long lines) and from token-level mutations of the shipped specs.
A spec is parsed and checked, then summarised as `tessel check` does. Plans are GPipe
plans made from the shipped specs, mutated as JSON (dropped or swapped actions, changed numbers, types and
fields, deep nesting, huge counts; a spec whose forwards keep memory, a micro-batch's memory
going below zero, an inference plan holding backward blocks); a plan that loads is simulated and
exported to torch CSV.

Inputs run one after another in a child process; the parent kills the child if one input runs
over the wall-clock limit (then counted as over the limit) and starts a new one. CPU time per
input is measured in the child. Outcomes: accepted, clear error (a TesselError), traceback (any
other exception), over the limit. Peak memory is the largest resident size any child reached.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import re
import resource
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPECS = sorted((ROOT / "specs").glob("*.tsl"))
_PLANS: list[str] = []


def seed_plans() -> list[str]:
    """The plans to mutate, as plan-file JSON made here from the shipped specs (bench/plans is
    generated, not part of the tree): each spec's GPipe plan at 1 and 4 micro-batches, lowered
    non-blocking and blocking."""
    if not _PLANS:
        from tessel_dsl.lang.parser import parse_file
        from tessel_dsl.plan import make_plan, plan_to_json
        from tessel_dsl.search import baselines

        for path in SPECS:
            spec = parse_file(path)
            for n in (1, 4):
                try:
                    sched = baselines.build(spec, "gpipe", n)
                except Exception:  # noqa: BLE001 - a baseline that does not apply to this spec
                    continue
                for blocking in (False, True):
                    _PLANS.append(json.dumps(plan_to_json(make_plan(spec, sched, blocking=blocking))))
    return _PLANS

NUMBERS = ["0", "1", "2", "3", "-1", "0.5", "2.5", "4096", "4097", "100000", "99999999999999999",
           "1" + "0" * 15, "9" * 400, "9" * 5000, "00000000000000000001", "1.0000000001", "2.000000001",
           "100000.00001", "0.1", "0." + "0" * 40 + "1", "1/3"]
UNITS = ["", "", "", "ms", "us", "s", "ns", "GB", "MB", "GiB", "TB", "x", "%", "B", "min", "parsecs"]
PATHS = ["/dev/zero", "/dev/urandom", "/etc/passwd", "/proc/self/environ", "a\x00b.tsl", "missing.tsl",
         "lib/../lib.tsl", "/", ".", "specs/vshape.tsl", "../" * 20 + "etc/shadow", "x" * 5000 + ".tsl"]
KINDS = ["forward", "backward", "input_grad", "weight_grad", "other"]
TOKEN = re.compile(r"\s+|[A-Za-z_]\w*(?:\{[^{}\n]*\}\w*)*|\d+(?:\.\d+)?%?|->|\.\.|<=|>=|==|!=|.", re.S)


# ---- spec inputs ------------------------------------------------------------------------------

def _num(r: random.Random) -> str:
    return r.choice(NUMBERS) if r.random() < 0.3 else str(r.randint(0, 12))


def _qty(r: random.Random) -> str:
    return _num(r) + r.choice(UNITS)


def _name(r: random.Random) -> str:
    base = r.choice(["F", "B", "G", "I", "W", "X", "emb", "head"])
    return base + r.choice(["", "0", "1", "{i}", "{i+1}", "{D-1-i}", "{j}", str(r.randint(0, 20)), "{i % 2}",
                            "{k % 0}", "{(i - 3) % D}"])


def _devset(r: random.Random) -> str:
    return r.choice(["0", "1", "i", "all", "0..3", "[0, 2]", "D-1", "0..D-1", "[" + ",".join(["0"] * r.randint(1, 9)) + "]",
                     _num(r), f"{_num(r)}..{_num(r)}", "i % D", "i % 0", "(i + 1) % -2", f"{_num(r)} % {_num(r)}"])


def _block(r: random.Random) -> str:
    parts = [r.choice(KINDS), _name(r)]
    if r.random() < 0.2:
        parts += ["of", _name(r)]
    if r.random() < 0.85:
        parts += ["on", _devset(r)]
    for _ in range(r.choice([0, 1, 2, 3, 3, 6])):
        parts += r.choice([["time", _qty(r)], ["memory", _qty(r)], ["grad", _name(r)], ["grad", "time", _qty(r)],
                           ["infer", "memory", _qty(r)]])
    return " ".join(parts)


def _edges(r: random.Random) -> str:
    nodes = []
    for _ in range(r.randint(1, 4)):
        nodes.append(r.choice([_name(r), "{" + ", ".join(_name(r) for _ in range(r.randint(1, 3))) + "}",
                               f"chain(F{{k}} for k in 0..{_num(r)})", f"{{F{{k}} for k in 0..{_num(r)}}}"]))
    tensor = f" : [{_num(r)}, {_num(r)}] {r.choice(['f32', 'bf16', 'q4'])}" if r.random() < 0.2 else ""
    return " -> ".join(nodes) + tensor


def _body(r: random.Random, depth: int, out: list[str], indent: str = "") -> None:
    for _ in range(r.randint(1, 4)):
        roll = r.random()
        if roll < 0.4:
            out.append(indent + _block(r))
        elif roll < 0.65:
            out.append(indent + _edges(r))
        elif roll < 0.85 and depth < 5:
            var = r.choice("ijk")
            out.append(f"{indent}for {var} in {r.choice(['0', '1', _num(r)])}..{r.choice(['D-1', '3', _num(r)])}:")
            _body(r, depth + 1, out, indent + "  ")
        else:
            out.append(indent + f"use s{r.randint(0, 3)}({_num(r) if r.random() < 0.5 else ''})")


def _recent(r: random.Random) -> list[str]:
    """Constructions of the latest round of bad input: self-defined parameters, `memory ... on`
    with negative or out-of-range devices, quantities a hair off their resolution, quantities
    beyond the plan limits, huge tensors, chains and groups over many undefined names."""
    n = r.choice([50, 2_000, 100_001])
    return r.choice([
        [f"param {v} = {v}{r.choice(['', ' + 1', ' * 2'])}" for v in r.sample(["D", "X", "T"], r.randint(1, 2))],
        [f"memory {_qty(r)}{r.choice(['', ' reserve ' + _qty(r)])} on {r.choice(['-1', 'D-1', '0, 7', '0..D', _devset(r)])}"],
        [f"memory {_qty(r)} {r.choice(['+', '-'])} {_qty(r)}"],
        ["resolution memory 1GB", f"memory 80GB + {r.choice(['1B', '0B', '1000000000B', '0.000000001GB'])}"],
        ["resolution time 1ms", f"forward Q on 0 time {r.choice(['100000.00001ms', '(0.1 * 30)ms', '1ns', '2.5ms'])}"],
        ["resolution memory 1GB", f"forward Q on 0 time 1 memory {r.choice(['2.000000001GB', '1.5GB', '(0.7 * 10)GB'])}"],
        [f"derive backward time {r.choice(['1.0000000001x', '1.5x', '(0.1 * 20)x', '0x', '1/3x'])}"],
        [f"resolution memory {r.choice(['1B', '0.5B', '2TB'])}", f"memory {r.choice(['2TB', '1TB', '8'])}"],
        ["resolution time 1ns", f"forward Q on 0 time {r.choice(['1200s', '1s', '1ms'])}", f"microbatches {_num(r)}"],
        [f"Q -> R : [{r.choice(['1000000000', '3', '99999999999999'])}, 1000000000, {_num(r)}] f32"],
        [f"link latency {r.choice(['2000000000000', '1', '0.5'])}"],
        [f"F0 -> chain(X{{i}} for i in 0..{n - 1})"],
        ["F0 -> {" + ", ".join(f"U{i}" for i in range(r.choice([30, 3_000]))) + "}"],
        [f"forward {'F' * r.choice([150, 300])} on 0 time 1"],
    ])


def plain_lines_spec(r: random.Random) -> str:
    """A long file of plain block lines, as a profiler writes them (the parser's fast path), with an
    occasional unusual or broken line among them."""
    lines = ["placement plain", "devices 4", "memory 8GB", "resolution time 1ms", "resolution memory 1MB"]
    odd = ["forward X on 0 time 1 memory", "forward time on 0 time 1", "forward A{1} on 0 time 1",
           "for i in 0..1:", "  forward L on 1 time 1", "forward Y on 0 time 1e5", "forward Z on [0, 1] time 1",
           "forward W on 0 time 1 " + "memory 1 " * 2_000 + "%", "(", "backward Q of F0 on all time 2"]
    for i in range(r.choice([10, 500, 5_000])):
        if r.random() < 0.002:
            lines.append(r.choice(odd))
            continue
        opts = [f"time {r.choice(['1', '2ms', '3 ms', '1.000ms', '2.5ms' if r.random() < 0.01 else '4'])}"]
        if r.random() < 0.5:
            opts.append(f"memory {r.choice(['1MB', '2', '0.001GB', '0.5MB' if r.random() < 0.01 else '3MB'])}")
        if r.random() < 0.1:
            opts.append(r.choice(["grad G{0}".format(i), "grad time 2x", "infer memory 1MB"]))
        lines.append(f"{r.choice(['forward', 'forward', 'other'])} F{i} on {r.choice(['0', '3', '0..1', 'all', '2 .. 3'])} "
                     + " ".join(opts) + r.choice(["", "", "  # profiled"]))
    if r.random() < 0.5:
        lines.append("derive backward time " + r.choice(["2x", "1.5x"]))
    return "\n".join(lines) + "\n"


def remainder_spec(r: random.Random) -> str:
    """An interleaved chain placed with `%`, well-formed but for the numbers: so the remainder is
    evaluated (by zero, negative, huge, fractional) rather than stopped at the syntax."""
    chunks, devices = r.choice(["8", "4", _num(r)]), r.choice(["4", "2", _num(r)])
    place = r.choice(["k % D", "k % 0", "(k + 1) % -2", f"k % {_num(r)}", f"{_num(r)} % D", "(D - 1 - k) % D"])
    name = r.choice(["C{k}", "C{k % D}", "C{k % 2}"])
    return (f"placement rem\nparam D = {devices}\ndevices D\nmemory 8\nmicrobatches 2\nmode train\n"
            f"for k in 0..{chunks}-1:\n    forward {name} on {place} time 1 memory 1 grad time 2\n"
            f"chain(C{{k}} for k in 0..{chunks}-1)\nderive backward\n")


def generated_spec(r: random.Random) -> tuple[str, dict]:
    if r.random() < 0.05:
        return plain_lines_spec(r), {}
    if r.random() < 0.05:
        return remainder_spec(r), {}
    lines = [f"placement p{r.randint(0, 9)}"]
    if r.random() < 0.8:
        lines.append(f"param D = {r.choice(['2', '4', _num(r)])}")
    if r.random() < 0.3:
        lines.append(f"param X = {_num(r)}")
    lines.append(f"devices {r.choice(['D', '2', '4', _num(r)])}")
    lines.append(f"memory {_qty(r)}" + (f", infer {_qty(r)}" if r.random() < 0.2 else ""))
    for what, unit in (("time", "ms"), ("memory", "GB")):
        if r.random() < 0.4:
            lines.append(f"resolution {what} {r.choice(['1', '0.5', '0', '-1', _num(r)])}{unit}")
    if r.random() < 0.2:
        lines.append(f"microbatches {_num(r)}")
    if r.random() < 0.2:
        lines.append(f"link latency {_qty(r)} bandwidth {_num(r)} GB/s")
    if r.random() < 0.15:
        lines.append(f'include "{r.choice(PATHS)}"')
    for s in range(r.randint(0, 3)):
        lines.append(f"shape s{s}(a=1):")
        body: list[str] = []
        _body(r, 3, body, "  ")
        if r.random() < 0.3:
            body += [f"  use s{max(0, s - 1)}()"] * r.randint(1, 3)
        lines += body
    _body(r, 0, lines)
    if r.random() < 0.3:
        for _ in range(r.randint(1, 3)):
            lines += _recent(r)
    if r.random() < 0.5:
        lines.append("derive backward" + (f" time {_qty(r)}" if r.random() < 0.5 else ""))
    if r.random() < 0.3:
        lines.append(f"expect {r.choice(['bubble', 'period', 'peak_memory', 'nonsense'])} <= {_qty(r)}")
    if r.random() < 0.2:
        lines.append(f"mode {r.choice(['train', 'infer', 'sideways'])}")
    sets = {"D": r.choice(NUMBERS + ["4", "2", "x", "nan", "inf", "1e400", "-1", "1e-300"])} if r.random() < 0.2 else {}
    return "\n".join(lines) + "\n", sets


def mutated_spec(r: random.Random) -> tuple[str, dict]:
    text = r.choice(SPECS).read_text()
    toks = TOKEN.findall(text)
    for _ in range(r.randint(1, 6)):
        if not toks:
            break
        i = r.randrange(len(toks))
        op = r.random()
        if op < 0.2:
            del toks[i]
        elif op < 0.35:
            toks.insert(i, toks[r.randrange(len(toks))])
        elif op < 0.5:
            j = r.randrange(len(toks))
            toks[i], toks[j] = toks[j], toks[i]
        elif op < 0.7 and re.fullmatch(r"\d+(\.\d+)?", toks[i]):
            toks[i] = r.choice(NUMBERS)
        elif op < 0.8:
            toks.insert(i, r.choice(["\n", "  ", "(", "]", "{", "->", "for", "..", ":", "#", '"', "\t", "\x00"]))
        elif op < 0.9:
            # repeat one whole line many times
            joined = "".join(toks)
            lines = joined.split("\n")
            k = r.randrange(len(lines))
            lines[k:k + 1] = [lines[k]] * r.choice([2, 50, 2000])
            toks = TOKEN.findall("\n".join(lines))
        else:
            toks = toks[: i]  # truncated file
    sets = {}
    if r.random() < 0.3:
        sets = {r.choice(["D", "N", "L", "zz"]): r.choice(NUMBERS + ["-3", "x", "1e400", "nan"])}
    return "".join(toks), sets


def run_spec(text: str, sets: dict) -> str:
    from tessel_dsl.cli.check import summarize
    from tessel_dsl.lang.parser import parse

    spec = parse(text, file=str(ROOT / "specs" / "fuzz.tsl"), sets=sets or None)
    summarize(spec)
    return "accepted"


# ---- plan inputs ------------------------------------------------------------------------------

_EXTREMES = [None, True, False, 0, -1, 1, 2, 99, 10 ** 9, 10 ** 18, -(10 ** 9), 1.5, -0.0, float("nan"),
             float("inf"), "", "F0", "SEND", [], {}, [0], {"x": 1}]


def _walk(r: random.Random, data):
    """A random (container, key) inside `data`."""
    node, key = None, None
    cur = data
    for _ in range(r.randint(1, 8)):
        if isinstance(cur, dict) and cur:
            k = r.choice(list(cur))
        elif isinstance(cur, list) and cur:
            k = r.randrange(len(cur))
        else:
            break
        node, key, cur = cur, k, cur[k]
    return node, key


def _program_mutation(r: random.Random, data) -> None:
    progs = data.get("programs") if isinstance(data, dict) else None
    progs = [p for p in progs if isinstance(p, dict)] if isinstance(progs, list) else []
    if not progs:
        return
    acts = r.choice(progs).get("actions")
    if not isinstance(acts, list) or not acts or not all(isinstance(a, dict) for a in acts):
        return
    i = r.randrange(len(acts))
    op = r.random()
    if op < 0.3:
        del acts[i]
    elif op < 0.5:
        j = r.randrange(len(acts))
        acts[i], acts[j] = acts[j], acts[i]
    elif op < 0.65:
        acts[i]["mb"] = r.choice([0, 1, 99, -1, 10 ** 9])
    elif op < 0.8:
        acts[i]["peers"] = r.choice([[], [0], [0, 0], [99], [-1]])
    else:
        acts.insert(i, dict(acts[r.randrange(len(acts))]))


def _spec_meaning_mutation(r: random.Random, spec: dict) -> None:
    """A plan whose spec is well-formed but means something `tessel check` refuses: memory that
    no backward frees, a micro-batch's memory below zero, an inference plan with backward blocks."""
    blocks = [b for b in spec["blocks"] if isinstance(b, dict)]
    roll = r.random()
    if roll < 0.3:
        spec["mode"] = "infer"
    elif blocks:
        b = r.choice(blocks)
        if isinstance(b.get("memory"), int):
            b["memory"] += r.choice([1, -1, 5, -5, 2 ** 40])


def mutated_plan(r: random.Random) -> str:
    data = json.loads(r.choice(seed_plans()))
    for _ in range(r.randint(1, 3)):
        op = r.random()
        if op < 0.35:
            _program_mutation(r, data)
            continue
        node, key = _walk(r, data)
        if node is None:
            continue
        if op < 0.6:
            node[key] = r.choice(_EXTREMES)
        elif op < 0.7 and isinstance(node, dict):
            del node[key]
        elif op < 0.8 and isinstance(node, list):
            node.insert(key, node[key])
        elif op < 0.85 and isinstance(node, list):
            del node[key]
        elif op < 0.9:
            node[key] = r.choice([{"spec": {"devices": 10 ** 9}}, 10 ** 9, {"microbatches": 10 ** 9}])
        elif op < 0.92 and isinstance(data.get("spec"), dict) and isinstance(data["spec"].get("blocks"), list):
            _spec_meaning_mutation(r, data["spec"])
        elif op < 0.95 and isinstance(data.get("schedule"), dict):
            data["schedule"]["microbatches"] = r.choice([0, 10 ** 9, 10 ** 6, 100_001])
        elif isinstance(data.get("spec"), dict):
            data["spec"]["devices"] = r.choice([0, -1, 10 ** 9, 4097])
    text = json.dumps(data)
    roll = r.random()
    if roll < 0.04:
        text = '{"schema": "tessel-plan", "version": 1, "spec": ' + "[" * 100_000 + "]" * 100_000 + "}"
    elif roll < 0.08:
        text = text.replace('"time": 1', '"time": ' + "9" * r.choice([400, 5000]), 1)
    elif roll < 0.12:
        text = text[: r.randrange(len(text))]
    return text


def run_plan(text: str, tmp: Path) -> str:
    from tessel_dsl.interop.torch_csv import export_torch_csv
    from tessel_dsl.plan import load_plan
    from tessel_dsl.simulator import simulate

    path = tmp / "plan.json"
    path.write_text(text)
    plan = load_plan(path)
    simulate(plan)
    export_torch_csv(plan, None)
    return "accepted"


# ---- harness ----------------------------------------------------------------------------------

def make_input(kind: str, seed: int, index: int):
    r = random.Random(f"{seed}:{kind}:{index}")
    if kind == "spec":
        return generated_spec(r) if index % 2 == 0 else mutated_spec(r)
    return mutated_plan(r)


def _child(conn, seed: int, limit_bytes: int) -> None:
    from tessel_dsl.errors import TesselError

    resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    tmp = Path(tempfile.mkdtemp(prefix="tessel-fuzz-"))
    while True:
        job = conn.recv()
        if job is None:
            break
        kind, index = job
        t0 = time.process_time()
        detail = ""
        inp = make_input(kind, seed, index)  # outside the try: a generator bug is not the tool's
        try:
            outcome = run_spec(*inp) if kind == "spec" else run_plan(inp, tmp)
        except TesselError:
            outcome = "error"
        except BaseException as e:  # noqa: BLE001 -- exactly what the benchmark counts
            outcome = "traceback"
            detail = f"{type(e).__name__}: {str(e)[:200]} @ {traceback.extract_tb(e.__traceback__)[-1][:3]}"
        cpu = time.process_time() - t0
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        conn.send((outcome, cpu, rss, detail))


def run(specs: int, plans: int, seed: int = 1, limit: float = 10.0, memory_limit_gb: float = 4.0,
        progress: bool = False) -> dict:
    ctx = mp.get_context("fork" if sys.platform != "win32" else "spawn")
    jobs = [("spec", i) for i in range(specs)] + [("plan", i) for i in range(plans)]
    stats = {k: {"inputs": 0, "accepted": 0, "error": 0, "traceback": 0, "over_limit": 0, "max_cpu_s": 0.0,
                 "slowest": None, "cpu_s": 0.0} for k in ("spec", "plan")}
    examples: list[str] = []
    peak = 0
    child = conn = None

    def start():
        parent, inner = ctx.Pipe()
        p = ctx.Process(target=_child, args=(inner, seed, int(memory_limit_gb * 2 ** 30)), daemon=True)
        p.start()
        return p, parent

    t_start = time.monotonic()
    for n, (kind, index) in enumerate(jobs):
        if child is None:
            child, conn = start()
        conn.send((kind, index))
        s = stats[kind]
        s["inputs"] += 1
        # Wall clock with slack for a shared machine; CPU time is the number that is judged.
        answered = conn.poll(limit * 3)
        try:
            outcome, cpu, rss, detail = conn.recv() if answered else (None, 0.0, 0, "")
        except EOFError:  # the worker itself died (a crash, or the memory limit): a traceback's worth
            child.join()
            detail = f"worker died (exit code {child.exitcode})"
            child, answered = None, True
            outcome, cpu, rss = "traceback", 0.0, 0
        if answered:
            peak = max(peak, rss)
        else:
            child.kill()
            child.join()
            child = None
            outcome, cpu, detail = "over_limit", limit * 3, "killed: no answer within the wall-clock limit"
        if outcome != "over_limit" and cpu > limit:
            outcome = "over_limit"
        s[outcome] += 1
        s["cpu_s"] += cpu
        if cpu > s["max_cpu_s"]:
            s["max_cpu_s"], s["slowest"] = cpu, f"{kind}:{index}"
        if outcome in ("traceback", "over_limit") and len(examples) < 20:
            examples.append(f"{kind}:{index} {outcome} {detail}")
        if progress and n % 500 == 0:
            print(f"  {n}/{len(jobs)} inputs, {time.monotonic() - t_start:.0f}s", file=sys.stderr, flush=True)
    if child is not None:
        conn.send(None)
        child.join(10)
    return {"seed": seed, "limit_s": limit, "peak_rss_mb": round(peak / 2 ** 20, 1), "stats": stats,
            "examples": examples, "wall_s": round(time.monotonic() - t_start, 1)}


def table(res: dict) -> str:
    rows = ["| inputs | count | accepted | clear errors | tracebacks | over the limit | mean CPU ms | "
            "slowest CPU s (input) |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    names = {"spec": "generated + mutated specs", "plan": "mutated plans"}
    for k, s in res["stats"].items():
        if not s["inputs"]:
            continue
        rows.append(f"| {names[k]} | {s['inputs']} | {s['accepted']} | {s['error']} | {s['traceback']} | "
                    f"{s['over_limit']} | {1e3 * s['cpu_s'] / s['inputs']:.1f} | {s['max_cpu_s']:.2f} "
                    f"({s['slowest']}) |")
    rows.append(f"\npeak resident memory of the worker: {res['peak_rss_mb']} MB; limit per input "
                f"{res['limit_s']:g} s CPU; wall {res['wall_s']} s")
    return "\n".join(rows)


def scaling(sizes=(8_000, 20_000, 100_000), only: str | None = None) -> str:
    """CPU time of parse + check + `tessel check`'s summary for wide specs (every block ready at
    once, which made the dependency order quadratic), chains, and files of explicit block lines
    (one per block, as a profiler writes them), at growing block counts."""
    from tessel_dsl.cli.check import summarize
    from tessel_dsl.lang.parser import parse

    shapes = {
        "independent forwards": lambda n: f"placement w\ndevices 8\nmemory 1\nfor i in 0..{n - 1}:\n"
                                          f"  forward F{{i}} on 0 time 1\n",
        "fan-out from one block": lambda n: f"placement f\ndevices 8\nmemory 1\nforward S on 0 time 1\n"
                                            f"for i in 0..{n - 2}:\n  forward F{{i}} on 1 time 1\n  S -> F{{i}}\n",
        "explicit forward lines": lambda n: "placement e\ndevices 8\nmemory 1000GB\nresolution time 1ms\n"
                                            "resolution memory 1MB\n" + "".join(
                                                f"forward F{i} on {i % 8} time {1 + i % 3}ms memory {i % 5}MB\n"
                                                for i in range(n)),
        "chain + derived backward": lambda n: f"placement c\ndevices 8\nmemory {n}\nfor i in 0..{n // 2 - 1}:\n"
                                              f"  forward F{{i}} on 0 time 1 memory 1\n"
                                              f"for i in 0..{n // 2 - 2}:\n  F{{i}} -> F{{i+1}}\nderive backward\n",
    }
    rows = ["| spec | " + " | ".join(f"{n:,} blocks" for n in sizes) + " |",
            "|---|" + "---:|" * len(sizes)]
    for name, make in shapes.items():
        if only and only not in name:
            continue
        cells = []
        for n in sizes:
            text = make(n)
            t0 = time.process_time()
            summarize(parse(text))
            cells.append(f"{time.process_time() - t0:.2f} s")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--specs", type=int, default=10_000)
    ap.add_argument("--plans", type=int, default=1_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--limit", type=float, default=10.0, help="seconds of CPU per input")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--only", help="KIND:INDEX: print that input and run it here")
    ap.add_argument("--scaling", nargs="?", const="", default=None, metavar="SHAPE",
                    help="CPU time of checking large specs instead (of the shapes whose name holds SHAPE)")
    args = ap.parse_args()
    if args.scaling is not None:
        print(scaling(only=args.scaling or None))
        return
    if args.only:
        kind, _, index = args.only.partition(":")
        inp = make_input(kind, args.seed, int(index))
        print(repr(inp)[:4000])
        with tempfile.TemporaryDirectory() as tmp:
            print(run_spec(*inp) if kind == "spec" else run_plan(inp, Path(tmp)))
        return
    res = run(args.specs, args.plans, args.seed, args.limit, progress=not args.json)
    if args.json:
        print(json.dumps(res, indent=1))
    else:
        print(table(res))
        for e in res["examples"]:
            print(e)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
