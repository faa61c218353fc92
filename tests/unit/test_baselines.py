"""Baseline schedules: validity over many N, 1F1B's closed form, golden grids, applicability."""
from __future__ import annotations

from dataclasses import replace

import pytest

from tessel_dsl.errors import TesselError
from tessel_dsl.ir import Block, Edge, Kind, Mode, Spec
from tessel_dsl.lang.parser import parse
from tessel_dsl.search.baselines import BY_NAME, NotApplicable, build
from tessel_dsl.search.baselines.chain import unfolded
from tessel_dsl.search.baselines.compare import baseline_row
from tessel_dsl.validate import validate
from tests.paths import SPECS

F, B = Kind.FORWARD, Kind.BACKWARD


# --- the paper's placements, built in Python (costs as in DESIGN.md: F 1/+1, B 3/-1, shared 1/0) ---

def _spec(name, d, m, blocks, edges, n, infer=False) -> Spec:
    if infer:
        blocks = [replace(b, memory=0) for b in blocks if not b.kind.is_backward]
        keep = {b.name for b in blocks}
        edges = [(a, c) for a, c in edges if a in keep and c in keep]
    return Spec(name, d, m, tuple(blocks), tuple(Edge(a, c) for a, c in edges), n,
                Mode.INFER if infer else Mode.TRAIN)


def _seq(names):
    return list(zip(names, names[1:]))


def _stages(d, devs=None, tag="", tb=3):
    devs = list(range(d)) if devs is None else devs
    fw = [Block(f"{tag}F{i}", F, (dev,), 1, 1) for i, dev in enumerate(devs)]
    bw = [Block(f"{tag}B{i}", B, (dev,), tb, -1) for i, dev in enumerate(devs)]
    return fw, bw


def vshape(d=4, n=4, m=None, infer=False, tb=3) -> Spec:
    fw, bw = _stages(d, tb=tb)
    return _spec("vshape", d, d if m is None else m, fw + bw, _seq([b.name for b in fw + bw[::-1]]), n, infer)


def xshape(d=4, n=4, m=None, infer=False, tb=3) -> Spec:
    blocks, edges = [], []
    for tag, devs in (("D", list(range(d))), ("U", list(reversed(range(d))))):
        fw, bw = _stages(d, devs, tag, tb)
        blocks += fw + bw
        edges += _seq([b.name for b in fw + bw[::-1]])
    return _spec("xshape", d, d if m is None else m, blocks, edges, n, infer)


def mshape(d=4, n=6, m=6, infer=False) -> Spec:
    fw, bw = _stages(d)
    alld = tuple(range(d))
    blocks = [Block("E", F, alld, 1, 0)] + fw + bw + [Block("EB", B, alld, 1, 0)]
    return _spec("mshape", d, m, blocks, _seq(["E"] + [b.name for b in fw + bw[::-1]] + ["EB"]), n, infer)


def nnshape(d=4, n=6, m=6, infer=False) -> Spec:
    fw, bw = _stages(d)
    alld, h = tuple(range(d)), d // 2
    shared = [Block(x, F if x in ("E1", "E2") else B, alld, 1, 0) for x in ("E1", "E2", "E2B", "E1B")]
    names = (["E1"] + [f"F{i}" for i in range(h)] + ["E2"] + [f"F{i}" for i in range(h, d)]
             + [f"B{i}" for i in reversed(range(h, d))] + ["E2B"] + [f"B{i}" for i in reversed(range(h))] + ["E1B"])
    return _spec("nnshape", d, m, shared[:2] + fw + bw + shared[2:], _seq(names), n, infer)


def kshape(d=4, n=6, m=6, infer=False) -> Spec:
    fw, bw = _stages(d)
    alld, h = tuple(range(d)), d // 2
    blocks = fw + [Block("J", F, alld, 1, 1), Block("JB", B, alld, 1, -1)] + bw
    edges = _seq([f"F{i}" for i in range(h)]) + _seq([f"F{i}" for i in range(h, d)])
    edges += [(f"F{h - 1}", "J"), (f"F{d - 1}", "J"), ("J", "JB"), ("JB", f"B{h - 1}"), ("JB", f"B{d - 1}")]
    edges += _seq([f"B{i}" for i in reversed(range(h))]) + _seq([f"B{i}" for i in reversed(range(h, d))])
    return _spec("kshape", d, m, blocks, edges, n, infer)


def interleaved(d=4, n=4, m=None, infer=False, chunks=2) -> Spec:
    devs = [i for _ in range(chunks) for i in range(d)]
    fw, bw = _stages(len(devs), devs)
    return _spec("interleaved", d, 2 * d if m is None else m, fw + bw, _seq([b.name for b in fw + bw[::-1]]), n, infer)


def _zb(name, d, n, m, infer, devs, tf=1, ti=1, tw=1):
    """Zero-bubble training: stage k on device devs[k], forward F (+1), input gradient I (0),
    weight gradient W (-1, frees the activation); I retraces the chain, Ik -> Wk."""
    blocks, edges = [], []
    for k, dev in enumerate(devs):
        blocks += [Block(f"F{k}", F, (dev,), tf, 1), Block(f"I{k}", Kind.INPUT_GRAD, (dev,), ti, 0, f"F{k}"),
                   Block(f"W{k}", Kind.WEIGHT_GRAD, (dev,), tw, -1, f"F{k}")]
        edges.append((f"I{k}", f"W{k}"))
    edges += _seq([f"F{k}" for k in range(len(devs))] + [f"I{k}" for k in reversed(range(len(devs)))])
    return _spec(name, d, m, blocks, edges, n, infer)


def zbchain(d=4, n=4, m=None, infer=False, **costs) -> Spec:
    """specs/zerobubble.tsl's placement: stage i on device i."""
    return _zb("zbchain", d, n, d if m is None else m, infer, list(range(d)), **costs)


def zbv(d=4, n=4, m=None, infer=False, **costs) -> Spec:
    """ZB-V's placement: chunk 0 down devices 0..d-1, chunk 1 back up d-1..0."""
    return _zb("zbv", d, n, 2 * d if m is None else m, infer, list(range(d)) + list(reversed(range(d))), **costs)


# The baselines that apply to each placement: in training, then in inference where that differs
# (inference drops the backward blocks, so the zero-bubble placements become plain chains). This is
# the one table a new baseline is added to; the shipped specs are matched to these placements
# (SHIPPED_PLACEMENT below) and expect the same.
APPLICABLE = {
    # training: 1F1B and its kin run each weight gradient right after its input gradient
    zbchain: ({"gpipe", "zb-h1", "zb-h1-capped", "1f1b", "1f1b-capped", "1f1b+", "gpipe+"},
              {"gpipe", "1f1b", "1f1b-capped", "1f1b+", "gpipe+"}),
    zbv: ({"gpipe", "zb-v", "zb-v-capped"}, {"gpipe"}),
    interleaved: ({"gpipe", "interleaved-1f1b"},),
    vshape: ({"gpipe", "1f1b", "1f1b-capped", "1f1b+", "gpipe+"},),
    xshape: ({"gpipe", "chimera"},),
    mshape: ({"gpipe", "1f1b+", "gpipe+"},),
    nnshape: ({"gpipe", "1f1b+", "gpipe+"},),
    kshape: ({"gpipe", "1f1b+", "gpipe+"},),  # the two towers laid out one after the other (branches.py)
}
NAMES = tuple(BY_NAME)


def applicable(shape, infer: bool = False) -> set[str]:
    train_infer = APPLICABLE[shape]
    return train_infer[-1] if infer else train_infer[0]


def test_every_baseline_is_exercised_on_some_shape():
    # NAMES comes from the registry: a new record must say here where it applies.
    assert set(NAMES) == {name for modes in APPLICABLE.values() for names in modes for name in names}


@pytest.mark.parametrize("shape", list(APPLICABLE), ids=lambda f: f.__name__)
@pytest.mark.parametrize("d", [2, 4, 6])
@pytest.mark.parametrize("infer", [False, True], ids=["train", "infer"])
def test_applicable_baselines_are_valid_for_many_n(shape, d, infer):
    for n in range(1, 11):
        spec = shape(d=d, n=n, m=d + 2, infer=infer)
        for name in sorted(applicable(shape, infer)):
            s = build(spec, name)
            assert s.name == name and s.microbatches == n
            validate(spec, s, check_memory=not BY_NAME[name].ignores_memory)
            assert sorted((x.block, x.mb) for x in s.slots) == sorted(
                (b.name, mb) for b in spec.blocks for mb in range(n))


@pytest.mark.parametrize("shape", list(APPLICABLE), ids=lambda f: f.__name__)
def test_inapplicable_baselines_say_why(shape):
    spec = shape()
    for name in sorted(set(NAMES) - applicable(shape)):
        with pytest.raises(NotApplicable) as err:
            build(spec, name)
        assert any(why in str(err.value) for why in ("chain placement", "chain of stages", "opposite directions"))


def test_not_applicable_messages_name_the_obstacle():
    with pytest.raises(NotApplicable, match=r"block E runs on devices 0,1,2,3 \(1f1b\+ handles"):
        build(mshape(), "1f1b")
    with unfolded(), pytest.raises(NotApplicable, match="do not form one sequence"):
        build(kshape(), "1f1b+")  # as written; `compare` lays the towers out in sequence
    with pytest.raises(NotApplicable, match="has 1 independent part"):
        build(vshape(), "chimera")
    with pytest.raises(NotApplicable, match="unknown baseline 'pipedream'"):
        build(vshape(), "pipedream")
    assert issubclass(NotApplicable, TesselError)


@pytest.mark.parametrize("d", [2, 3, 4, 5])
@pytest.mark.parametrize("tb", [1, 2, 3])
def test_1f1b_makespan_closed_form(d, tb):
    for n in range(1, 13):
        spec = vshape(d=d, n=n, tb=tb)
        assert build(spec, "1f1b").makespan(spec) == (n + d - 1) * (1 + tb)


def test_1f1b_holds_d_minus_s_microbatches_on_stage_s():
    spec = vshape(d=4, n=10)
    assert build(spec, "1f1b").peak_memory(spec) == (4, 3, 2, 1)
    assert build(vshape(d=4, n=2), "1f1b").peak_memory(vshape(d=4, n=2)) == (2, 2, 2, 1)


def test_1f1b_warmup_shrinks_to_fit_memory():
    spec = vshape(d=4, n=8, m=2)
    s = build(spec, "1f1b")  # validate() inside checks M=2
    assert max(s.peak_memory(spec)) == 2
    with pytest.raises(TesselError, match="more than M=0"):
        build(vshape(d=4, n=8, m=0), "1f1b")


def test_gpipe_runs_in_waves_that_fit_memory():
    # vshape d=4 holds 1 unit per micro-batch on each device: M=4 holds waves of 4 micro-batches.
    spec = vshape(d=4, n=8, m=4)
    s = build(spec, "gpipe")  # validate() inside checks M=4
    assert s.peak_memory(spec) == (4, 4, 4, 4)
    order = _device_order(spec, s, 0)
    assert order == ([("F0", mb) for mb in range(4)] + [("B0", mb) for mb in range(4)]
                     + [("F0", mb) for mb in range(4, 8)] + [("B0", mb) for mb in range(4, 8)])
    row, _ = baseline_row(spec, "gpipe", 8)
    assert row.status == "ok" and not row.over_memory
    # By hand: a wave of 4 has its last forward end on device 3 at 3 + 4 = 7; device 3's backwards
    # run 7..19, and each stage up adds 3, so device 0's last backward ends at 28. Device 0 then
    # starts the next wave, which repeats the first shifted by 28.
    assert s.makespan(spec) == 2 * 28 and build(vshape(d=4, n=16, m=4), "gpipe").makespan(spec) == 4 * 28
    # When M holds every micro-batch it is plain GPipe: one wave.
    roomy = vshape(d=4, n=8, m=8)
    assert _device_order(roomy, build(roomy, "gpipe"), 0) == [("F0", mb) for mb in range(8)] + [
        ("B0", mb) for mb in range(8)]
    with pytest.raises(TesselError, match="more than M=0"):
        build(vshape(d=4, n=8, m=0), "gpipe")


def _grid(spec, name):
    return "\n".join(line.rstrip() for line in build(spec, name).grid(spec).splitlines())


GOLDEN = {
    ("gpipe", 2, 3): """
dev0 | F0:0 F0:1 F0:2 .    .    .    .    B0:0 ~    ~    B0:1 ~    ~    B0:2 ~    ~
dev1 | .    F1:0 F1:1 F1:2 B1:0 ~    ~    B1:1 ~    ~    B1:2 ~    ~    .    .    .""",
    ("1f1b", 2, 3): """
dev0 | F0:0 F0:1 .    .    .    B0:0 ~    ~    F0:2 B0:1 ~    ~    .    B0:2 ~    ~
dev1 | .    F1:0 B1:0 ~    ~    F1:1 B1:1 ~    ~    F1:2 B1:2 ~    ~    .    .    .""",
    ("gpipe", 3, 2): """
dev0 | F0:0 F0:1 .    .    .    .    .    .    .    .    B0:0 ~    ~    B0:1 ~    ~
dev1 | .    F1:0 F1:1 .    .    .    .    B1:0 ~    ~    B1:1 ~    ~    .    .    .
dev2 | .    .    F2:0 F2:1 B2:0 ~    ~    B2:1 ~    ~    .    .    .    .    .    .""",
    # waves of 2 (M=2), then 1: device 0 starts micro-batch 2 after its backwards of 0 and 1
    ("gpipe", 2, 3, 2): """
dev0 | F0:0 F0:1 .    .    .    .    B0:0 ~    ~    B0:1 ~    ~    F0:2 .    .    .    .    B0:2 ~    ~
dev1 | .    F1:0 F1:1 B1:0 ~    ~    B1:1 ~    ~    .    .    .    .    F1:2 B1:2 ~    ~    .    .    .""",
    ("1f1b", 3, 2): """
dev0 | F0:0 F0:1 .    .    .    .    .    .    .    B0:0 ~    ~    .    B0:1 ~    ~
dev1 | .    F1:0 F1:1 .    .    .    B1:0 ~    ~    .    B1:1 ~    ~    .    .    .
dev2 | .    .    F2:0 B2:0 ~    ~    F2:1 B2:1 ~    ~    .    .    .    .    .    .""",
    ("1f1b", 3, 4): """
dev0 | F0:0 F0:1 F0:2 .    .    .    .    .    .    B0:0 ~    ~    F0:3 B0:1 ~    ~    .    B0:2 ~    ~    .    B0:3 ~    ~
dev1 | .    F1:0 F1:1 .    .    .    B1:0 ~    ~    F1:2 B1:1 ~    ~    F1:3 B1:2 ~    ~    .    B1:3 ~    ~    .    .    .
dev2 | .    .    F2:0 B2:0 ~    ~    F2:1 B2:1 ~    ~    F2:2 B2:2 ~    ~    F2:3 B2:3 ~    ~    .    .    .    .    .    .""",
}


@pytest.mark.parametrize("key", list(GOLDEN), ids=lambda k: f"{k[0]}-D{k[1]}-N{k[2]}" + (f"-M{k[3]}" if k[3:] else ""))
def test_golden_grids(key):
    name, d, n, *m = key
    assert _grid(vshape(d=d, n=n, m=m[0] if m else 8), name) == GOLDEN[key].strip("\n")


def _device_order(spec, s, d):
    return [(x.block, x.mb) for x in s.per_device(spec)[d]]


@pytest.mark.parametrize("d", [4, 8])
def test_1f1b_plus_pins_shared_blocks_next_to_their_neighbours(d):
    spec = mshape(d=d, n=12, m=d)
    order = _device_order(spec, build(spec, "1f1b+"), 0)
    for n in range(12):
        assert order[order.index(("F0", n)) - 1] == ("E", n)
        assert order[order.index(("B0", n)) + 1] == ("EB", n)
    # With several shared blocks they compete for the devices: each stays within one block of
    # its neighbour (E2 before F2, E2B after B2 on the anchor device).
    spec = nnshape(d=d, n=12, m=d)
    order = _device_order(spec, build(spec, "1f1b+"), d // 2)
    for n in range(12):
        i = order.index((f"F{d // 2}", n))
        assert ("E2", n) in order[i - 2:i]
        j = order.index((f"B{d // 2}", n))
        assert ("E2B", n) in order[j + 1:j + 3]


def test_1f1b_plus_on_a_plain_chain_is_1f1b():
    spec = vshape(d=4, n=9)
    assert build(spec, "1f1b+").slots == build(spec, "1f1b").slots


@pytest.mark.parametrize("shape,bubble", [(mshape, 0.25), (nnshape, 0.20)], ids=["M", "NN"])
def test_1f1b_plus_steady_bubble_matches_the_paper(shape, bubble):
    row, _ = baseline_row(shape(n=16), "1f1b+", 16)
    assert row.steady_bubble == pytest.approx(bubble)


def test_1f1b_steady_state_has_no_bubble():
    row, _ = baseline_row(vshape(n=16), "1f1b", 16)
    assert row.period == 4 and row.steady_bubble == 0


def test_chimera_unit_matches_chimera_formula_when_backward_equals_forward():
    # Chimera's paper: bubble ratio (D-2)/(2N+D-2) for a basic unit of N=D micro-batches with
    # equal forward and backward cost; D=4 gives 20%.
    spec = xshape(d=4, n=2, tb=1)  # 2 spec micro-batches = one unit of 4 (2 per direction)
    s = build(spec, "chimera")
    assert s.makespan(spec) == 10 and s.bubble_rate(spec) == pytest.approx(0.2)
    row, _ = baseline_row(xshape(d=4, tb=1), "chimera", 4)
    assert row.steady_bubble == pytest.approx(0.2)


def test_chimera_with_recompute_costs():
    row, _ = baseline_row(xshape(d=4, n=8), "chimera", 8)
    assert row.period == 11 and row.steady_bubble == pytest.approx(3 / 11)
    assert max(row.peak_memory) <= 4


def test_chimera_that_does_not_fit_memory_is_not_applicable():
    with pytest.raises(NotApplicable, match="does not fit memory M=4"):
        build(xshape(d=8, n=8, m=4), "chimera")
    build(xshape(d=8, n=8, m=8), "chimera")


# The placement of each shipped spec, whose row of APPLICABLE it expects in both modes: 1F1B needs
# a chain with stage i on device i, 1F1B+ additionally allows blocks on every device around such a
# chain, Chimera needs two opposite chains, interleaved 1F1B needs looped stages, GPipe runs
# anything. Zero-bubble training splits each backward into two blocks, which the 1F1B family runs
# as one (I then W); its inference is a plain V-shape. ZB-H1 needs the split backward on a chain, ZB-V on a V of two chunks per device
# (`--set C=2`, tests/unit/test_baselines_zerobubble.py).
SHIPPED_PLACEMENT = {"interleaved": interleaved, "kshape": kshape, "mshape": mshape, "nnshape": nnshape,
                     "vshape": vshape, "xshape": xshape, "zerobubble": zbchain}


def test_applicability_table_covers_every_shipped_spec():
    stems = {p.stem for p in SPECS.glob("*.tsl")}
    assert stems == set(SHIPPED_PLACEMENT)


@pytest.mark.parametrize("spec_file", sorted(SPECS.glob("*.tsl")), ids=lambda p: p.stem)
@pytest.mark.parametrize("mode", ["train", "infer"])
@pytest.mark.parametrize("name", NAMES)
def test_shipped_specs_get_each_applicable_baseline_and_clear_refusals(spec_file, mode, name):
    from tessel_dsl.lang.parser import parse_file

    spec = parse_file(spec_file, mode=mode)
    expected = applicable(SHIPPED_PLACEMENT[spec_file.stem], infer=mode == "infer")
    if name not in expected:
        with pytest.raises(NotApplicable) as e:
            build(spec, name, 8)
        assert str(e.value)
        return
    s = build(spec, name, 8)  # a wrong refusal fails here
    validate(spec, s, check_memory=not BY_NAME[name].ignores_memory)
    assert s.microbatches == 8 and s.makespan(spec) > 0


# --- 1F1B on chains of stages that are several blocks or a tensor-parallel group ---

def _chain(stages, n, m, tb=2):
    """A training chain: `stages` is a list of (device tuple, forward times); each forward block
    gets a backward of `tb` times its time on the same devices, retracing the chain."""
    blocks, names = [], []
    for s, (devs, times) in enumerate(stages):
        for k, t in enumerate(times):
            blocks.append(Block(f"F{s}_{k}", F, devs, t, 1 if k == 0 and len(devs) == 1 else 0))
            names.append(f"F{s}_{k}")
    back = []
    for s, (devs, times) in reversed(list(enumerate(stages))):
        for k, t in reversed(list(enumerate(times))):
            blocks.append(Block(f"B{s}_{k}", B, devs, tb * t, -1 if k == 0 and len(devs) == 1 else 0))
            back.append(f"B{s}_{k}")
    return _spec("chain", 1 + max(d for devs, _ in stages for d in devs), m, blocks, _seq(names + back), n)


def test_1f1b_takes_an_embedding_on_the_first_stage_as_part_of_it():
    # E then F0 on device 0 is one stage: the same 1F1B as one merged block of their summed time.
    split = _chain([((0,), [1, 2]), ((1,), [3]), ((2,), [3])], n=6, m=3)
    merged = _chain([((0,), [3]), ((1,), [3]), ((2,), [3])], n=6, m=3)
    s = build(split, "1f1b")
    assert s.makespan(split) == build(merged, "1f1b").makespan(merged) == (6 + 2) * 9
    order = _device_order(split, s, 0)
    assert order[:4] == [("F0_0", 0), ("F0_1", 0), ("F0_0", 1), ("F0_1", 1)]  # the stage's blocks stay together


def test_1f1b_runs_a_tensor_parallel_pair_as_one_stage():
    # Stage 0 on the pair (0, 1), then one stage each on 2 and 3: like a 3-device chain.
    pair = _chain([((0, 1), [2]), ((2,), [2]), ((3,), [2])], n=5, m=3)
    plain = _chain([((0,), [2]), ((1,), [2]), ((2,), [2])], n=5, m=3)
    s = build(pair, "1f1b")
    assert s.makespan(pair) == build(plain, "1f1b").makespan(plain) == (5 + 2) * 6
    assert _device_order(pair, s, 0) == _device_order(pair, s, 1)


def _tp_with_shared(n: int) -> Spec:
    """Megatron's layout in small: stages are the tensor-parallel pairs (0, 1) and (2, 3); a
    vocabulary-parallel embedding E and head H run on all four devices."""
    everyone = (0, 1, 2, 3)
    blocks = [Block("E", F, everyone, 1, 0), Block("F0", F, (0, 1), 2, 1), Block("F1", F, (2, 3), 2, 1),
              Block("H", F, everyone, 1, 0), Block("HB", B, everyone, 2, 0), Block("B1", B, (2, 3), 4, -1),
              Block("B0", B, (0, 1), 4, -1), Block("EB", B, everyone, 2, 0)]
    return _spec("tp_shared", 4, 8, blocks, _seq(["E", "F0", "F1", "H", "HB", "B1", "B0", "EB"]), n)


def test_1f1b_plus_runs_tensor_parallel_stages_with_blocks_shared_by_all():
    # Worked by hand (N=2). Stage (0,1) warms up one forward: E:0 F0:0 E:1 F0:1, then B0:0 EB:0
    # B0:1 EB:1 (EB pinned after the last stage's backward it needs, B0). Stage (2,3) alternates:
    # F1:0 H:0 HB:0 B1:0 F1:1 H:1 HB:1 B1:1 (H after F1, HB before B1). Earliest starts:
    # E:0 0-1, F0:0 1-3, E:1 3-4, F0:1 and F1:0 4-6, H:0 6-7, HB:0 7-9, B1:0 9-13, B0:0 and
    # F1:1 13-17 / 13-15, H:1 17-18, EB:0 18-20, HB:1 20-22, B1:1 22-26, B0:1 26-30, EB:1 30-32.
    spec = _tp_with_shared(2)
    with pytest.raises(NotApplicable, match="block E runs on devices 0,1,2,3"):
        build(spec, "1f1b")
    s = build(spec, "1f1b+")
    start = {(x.block, x.mb): x.start for x in s.slots}
    assert start == {("E", 0): 0, ("F0", 0): 1, ("E", 1): 3, ("F0", 1): 4, ("F1", 0): 4, ("H", 0): 6,
                     ("HB", 0): 7, ("B1", 0): 9, ("B0", 0): 13, ("F1", 1): 13, ("H", 1): 17, ("EB", 0): 18,
                     ("HB", 1): 20, ("B1", 1): 22, ("B0", 1): 26, ("EB", 1): 30}
    assert s.makespan(spec) == 32
    for n in range(1, 9):  # and valid (dependencies, one block at a time, memory 8) for other N
        validate(spec, build(_tp_with_shared(n), "1f1b+"))


def test_1f1b_refuses_a_device_in_two_stages():
    spec = _chain([((0,), [1]), ((1,), [1]), ((0,), [1])], n=2, m=3)
    with pytest.raises(NotApplicable, match="device 0 holds two stages"):
        build(spec, "1f1b")


def test_two_stages_on_a_device_are_named_whole():
    # An embedding with chunk 0 on device 0, and chunk 2 there too (interleaved): the stages
    # on device 0 are E..C0 and C2, not "E and C2".
    spec = parse("""
placement il
devices 2
memory 10
microbatches 2
mode train
forward E on 0 time 1 memory 1
for k in 0..3:
    forward C{k} on k % 2 time 1 memory 1
E -> chain(C{k} for k in 0..3)
derive backward
""")
    with pytest.raises(NotApplicable, match=r"device 0 holds two stages \(E\.\.C0 and C2\)"):
        build(spec, "1f1b")


def test_gpipe_runs_forwards_in_micro_batch_order():
    # Two forward blocks on device 0 (chunks 0 and 2 of an interleaved chain): GPipe finishes
    # micro-batch 0's forwards on a device before micro-batch 1's, then the backwards likewise.
    spec = _chain([((0,), [1]), ((1,), [1]), ((0,), [1]), ((1,), [1])], n=3, m=12)
    order = _device_order(spec, build(spec, "gpipe"), 0)
    assert order[:6] == [("F0_0", 0), ("F2_0", 0), ("F0_0", 1), ("F2_0", 1), ("F0_0", 2), ("F2_0", 2)]
    assert order[6:] == [("B2_0", 0), ("B0_0", 0), ("B2_0", 1), ("B0_0", 1), ("B2_0", 2), ("B0_0", 2)]


def test_gpipe_plus_runs_all_device_blocks_beside_their_stage():
    # mshape d=2 (E, F0, F1, B1, B0, EB; F 1, B 3, E and EB 1 on both devices), N=2, by hand.
    # GPipe orders device 1 by (phase, micro-batch): E:0 F1:0 E:1 F1:1 B1:0 EB:0 B1:1 EB:1, so E:1
    # waits for F1:0 and EB:0 sits between the two B1: E 0-1, F0 1-2, F1 2-3, E 3-4, F0 4-5,
    # F1 5-6, B1 6-9, B0 9-12, EB 12-13, B1 13-16, B0 16-19, EB 19-20.
    # GPipe+ pins E before F0 and EB after B0 on device 0's queue, so device 1 runs both
    # forwards, then both backwards: E 0-1, F0 1-2, E 2-3, F0 3-4 with F1 3-4, F1 4-5,
    # B1 5-8, B1 8-11 with B0 8-11, EB 11-12, B0 12-15, EB 15-16.
    spec = mshape(d=2, n=2, m=6)
    assert build(spec, "gpipe").makespan(spec) == 20
    plus = build(spec, "gpipe+")
    assert plus.makespan(spec) == 16
    assert _device_order(spec, plus, 1) == [("E", 0), ("E", 1), ("F1", 0), ("F1", 1), ("B1", 0), ("B1", 1),
                                            ("EB", 0), ("EB", 1)]
    assert sorted((x.start, x.block, x.mb) for x in plus.slots if x.block in ("E", "EB")) == [
        (0, "E", 0), (2, "E", 1), (11, "EB", 0), (15, "EB", 1)]


def test_gpipe_plus_runs_in_waves_that_fit_memory_and_is_gpipe_on_a_plain_chain():
    # mshape d=4 holds 1 unit a micro-batch per device: M=3 holds waves of 3 micro-batches; each
    # device's blocks of one wave all go forward first, then backward.
    spec = mshape(d=4, n=6, m=3)
    plus = build(spec, "gpipe+")
    assert max(plus.peak_memory(spec)) == 3
    for d in range(4):
        order = [k for k in _device_order(spec, plus, d) if k[0] not in ("E", "EB")]
        for wave in (range(3), range(3, 6)):
            mine = [k for k in order if k[1] in wave]
            assert [spec.block(k[0]).kind.is_backward for k in mine] == [False] * 3 + [True] * 3
        assert order == sorted(order, key=lambda k: (k[1] // 3, spec.block(k[0]).kind.is_backward, k[1]))
    assert plus.makespan(spec) < build(spec, "gpipe").makespan(spec)
    chain = vshape(d=4, n=8, m=4)
    assert build(chain, "gpipe+").slots == build(chain, "gpipe").slots


M_SHAPE_27B = """placement m8_27b
resolution time 1ms
resolution memory 10MB
devices 8
memory 80GB reserve 52GB
microbatches 32
mode train
forward E on all time 1ms memory 0.05GB grad time 1ms
for i in 0..6:
    forward L{i} on i time 73ms memory 3.85GB grad time 146ms
forward L7 on 7 time 49ms memory 2.57GB grad time 98ms
forward H on all time 3ms memory 0.52GB grad time 6ms
E -> chain(L{i} for i in 0..7) -> H
derive backward
"""


def test_1f1b_plus_under_memory_plays_the_capped_order_on_a_clock():
    # An M-shape of 8 stages (a 27B model's layers, its embedding E and head H over every device)
    # whose devices hold 6 micro-batches (4.42 GB each in 28 GB) where 1F1B keeps 8 on the first.
    # 1F1B's fixed alternation with the warmup cut to 6, 6, 6, 5, ... waits on every stage:
    # 20283 ms. Played on a clock as memory-capped 1F1B does (a forward whenever fewer than the
    # cap are held, else the next backward once ready): 13959 ms, within memory.
    from tessel_dsl.lang.parser import parse
    from tessel_dsl.schedule import Schedule
    from tessel_dsl.search.baselines.classic import stage_phases
    from tessel_dsl.search.baselines.pinned import pinned_orders
    from tessel_dsl.search.compact import compact

    spec = parse(M_SHAPE_27B)
    plus = build(spec, "1f1b+")
    validate(spec, plus)
    fixed = Schedule(32, compact(spec, orders=pinned_orders(spec, "1F1B+",
                                                            lambda st: stage_phases(spec, st, 32, "1F1B+"))))
    assert fixed.fits_memory(spec) and max(plus.peak_memory(spec)) <= spec.capacity(0)
    assert plus.makespan(spec) == 13959 < fixed.makespan(spec) == 20283
    # With room for 1F1B's own warmup the order is the fixed one.
    roomy = parse(M_SHAPE_27B.replace("reserve 52GB", "reserve 40GB"))
    fixed = compact(roomy, orders=pinned_orders(roomy, "1F1B+", lambda st: stage_phases(roomy, st, 32, "1F1B+")))
    assert build(roomy, "1f1b+").slots == tuple(fixed)


def test_interleaved_1f1b_is_megatrons_order_and_reaches_the_bound_with_memory():
    # D=4, 2 chunks, enough memory: device 0 starts with (4-0-1)*2 + (2-1)*4 = 10 forwards, the
    # first four chunk-0 forwards of micro-batches 0..3, then their chunk-1 forwards.
    spec = interleaved(d=4, n=8, m=32)
    s = build(spec, "interleaved-1f1b")
    order = _device_order(spec, s, 0)
    assert order[:10] == [("F0", 0), ("F0", 1), ("F0", 2), ("F0", 3), ("F4", 0), ("F4", 1), ("F4", 2), ("F4", 3),
                          ("F0", 4), ("F0", 5)]
    assert order[10] == ("F0", 6) and order[11] == ("B4", 0)  # then one forward, one backward
    row, _ = baseline_row(interleaved(d=4, n=16, m=32), "interleaved-1f1b", 16)
    assert row.period == 8 and row.steady_bubble == 0  # the lower bound: 2 chunks x (1 + 3)


def test_interleaved_1f1b_shortens_its_warmup_to_fit_memory():
    spec = interleaved(d=4, n=8, m=6)
    s = build(spec, "interleaved-1f1b")  # validate() inside checks M=6
    assert max(s.peak_memory(spec)) <= 6
