"""Lockstep 1F1B+ (`search/lockstep.py`): valid plays on specs with all-device blocks (memory
tight, tensor-parallel stages, transfer lags), shorter than the baselines built independently
where the NN-shape's stages mix forwards and backwards, the same answer twice, nothing without
all-device blocks, and offered to the search as a best plan in hand that re-plans to another N."""
from __future__ import annotations

from dataclasses import replace

from tessel_dsl.lang.parser import parse, parse_file
from tessel_dsl.search.baselines import build
from tessel_dsl.search.bounds import makespan_bound
from tessel_dsl.search.finish import baseline_for
from tessel_dsl.search.lockstep import NAME, _play, lockstep
from tessel_dsl.search.refine import best_baseline
from tessel_dsl.validate import validate
from tests.paths import ROOT


def _nn(mem: int, n: int = 8, head: bool = False, enc=(23, 2, 47), dec=(10, 1, 19), emb=6) -> str:
    """An 8-device NN-shape: two all-device embeddings, four encoder and four decoder stages
    (forward time, memory, backward time each), and with `head` an all-device head holding memory."""
    return "\n".join([
        "placement nn", "devices 8", f"memory {mem}", f"microbatches {n}", "mode train",
        f"forward E1 on all time {emb} memory 0 grad time {emb}",
        "forward E2 on all time 2 memory 0 grad time 2",
        *(["forward H on all time 2 memory 1 grad time 3"] if head else []),
        "for i in 0..3:", f"    forward F{{i}} on i time {enc[0]} memory {enc[1]} grad time {enc[2]}",
        "for i in 4..7:", f"    forward F{{i}} on i time {dec[0]} memory {dec[1]} grad time {dec[2]}",
        "E1 -> chain(F{i} for i in 0..3) -> E2 -> chain(F{i} for i in 4..7)" + (" -> H" if head else ""),
        "derive backward", ""])



def _stretches(spec, sched):
    """The local blocks of each stretch between two all-device blocks, by the stretch's start."""
    everyone = set(range(spec.devices))
    cuts = sorted({s.start for s in sched.slots if set(spec.block(s.block).devices) == everyone}
                  | {s.end(spec) for s in sched.slots if set(spec.block(s.block).devices) == everyone})
    out: dict[int, list] = {}
    for s in sched.slots:
        if set(spec.block(s.block).devices) != everyone:
            at = max((c for c in cuts if c <= s.start), default=0)
            out.setdefault(at, []).append(s)
    return out


def test_valid_and_shorter_than_the_baselines_on_the_ul2_nn_shape():
    # 16 devices, four all-device blocks a micro-batch: 1F1B+ and GPipe+ mix a 23 ms forward
    # with a 47 ms backward between two of them; the lockstep play does so far less.
    spec = parse_file(ROOT / "bench" / "specs" / "real" / "ul2_nnshape16.tsl")
    got = lockstep(spec, 32, 10 ** 9)
    validate(spec, got)  # dependencies, one block at a time, memory
    span = got.makespan(spec)
    assert makespan_bound(spec, 32) <= span
    assert span < min(build(spec, b, 32).makespan(spec) for b in ("1f1b+", "gpipe+"))
    assert lockstep(spec, 32, 10 ** 9).slots == got.slots  # deterministic
    assert lockstep(spec, 32, span) is None  # nothing strictly shorter than what is in hand
    # Where the encoder's first stage runs a 47 ms backward, no other encoder stage starts a
    # 23 ms forward at the same time: that is what the stretches keep apart.
    encoder = {f"F{i}" for i in range(8)} | {f"B{i}" for i in range(8)}
    mixed = 0
    for slots in _stretches(spec, got).values():
        first = [s for s in slots if s.block in encoder and s.start == min(x.start for x in slots)]
        mixed += len({s.block[0] for s in first}) > 1
    plus = build(spec, "1f1b+", 32)
    mixed_plus = 0
    for slots in _stretches(spec, plus).values():
        first = [s for s in slots if s.block in encoder and s.start == min(x.start for x in slots)]
        mixed_plus += len({s.block[0] for s in first}) > 1
    assert mixed < mixed_plus


def test_memory_tight_tensor_parallel_and_lags_stay_valid():
    for mem in (1000, 12, 9):  # every micro-batch in flight; 6 on the encoder's stages; 4
        spec = parse(_nn(mem), "nn.tsl")
        for warm in range(0, 16):
            got = _play(spec, 8, warm)
            if got is not None:
                validate(spec, got)
        assert lockstep(spec, 8, 10 ** 9) is not None
    # A two-GPU tensor-parallel stage and a link: the play keeps both devices and every lag.
    text = _nn(1000).replace("for i in 0..3:\n    forward F{i} on i time 23",
                                        "forward F0 on [0, 1] time 23 memory 2 grad time 47\n"
                                        "for i in 2..3:\n    forward F{i} on i time 23")
    text = text.replace("chain(F{i} for i in 0..3)", "F0 -> chain(F{i} for i in 2..3)")
    text = text.replace("mode train", "mode train\nlink latency 3ms bandwidth 50 GB/s")
    tp = parse(text.replace("devices 8", "devices 8\nresolution time 1ms"), "tp.tsl")
    got = lockstep(tp, 8, 10 ** 9)
    validate(tp, got)
    from tessel_dsl.search.lags import lag
    start = {(s.block, s.mb): s.start for s in got.slots}
    assert any(lag(tp, e.src, e.dst) > 0 for e in tp.edges)
    for e in tp.edges:
        for mb in range(8):
            assert start[e.dst, mb] >= start[e.src, mb] + tp.block(e.src).time + lag(tp, e.src, e.dst)


def test_nothing_without_all_device_blocks():
    spec = parse_file(ROOT / "bench" / "specs" / "real" / "chain8.tsl")
    assert lockstep(spec, 32, 10 ** 9) is None


def test_offered_to_the_search_from_16_devices_or_at_the_bound():
    real = ROOT / "bench" / "specs" / "real"
    # 16 devices: kept above the bound, as the shortest plan in hand.
    wide = parse_file(real / "ul2_nnshape16.tsl")
    best, name = best_baseline(wide, 32, than=None)
    assert name == NAME and best.slots == lockstep(wide, 32, 10 ** 9).slots
    # 8 devices: the M-shape's play reaches the makespan bound, so it is kept (and proves it) ...
    at = parse_file(real / "mshape8.tsl")
    best, name = best_baseline(at, 32, than=None)
    assert name == NAME and best.makespan(at) == makespan_bound(at, 32) == 6171
    # ... the NN-shape's stays above it and is not (module text, "Where it is offered").
    above = parse_file(real / "nnshape8.tsl")
    assert lockstep(above, 32, 10 ** 9).makespan(above) > makespan_bound(above, 32)
    assert best_baseline(above, 32, than=None)[1] != NAME


def test_a_plan_naming_it_rebuilds_it_for_another_n():
    spec = parse_file(ROOT / "specs" / "mshape.tsl")
    for n in (8, 12):
        other = replace(spec, microbatches=n)
        got = baseline_for(other, NAME, n)
        validate(other, got)
        assert got.microbatches == n
        assert got.makespan(other) <= build(other, "gpipe+", n).makespan(other)


def test_the_second_family_reaches_the_bound_on_the_nn_shape_over_16_devices():
    # Stages with nothing of the stretch's kind ready start a block of the other kind: on the
    # 16-device NN-shape that play meets the makespan bound, which no play of the first family does.
    spec = parse_file(ROOT / "bench" / "specs" / "real" / "nnshape16.tsl")
    bound = makespan_bound(spec, 32)
    got = lockstep(spec, 32, 10 ** 9)
    validate(spec, got)
    assert got.makespan(spec) == bound == 1955
    first = [_play(spec, 32, a) for a in range(32 + 16 + 1)]
    assert min(p.makespan(spec) for p in first if p is not None) > bound



def test_the_encoder_leads_the_first_familys_stretches_and_the_decoder_fills_them():
    # UL2 over 16 devices: encoder stages 70 ms of work a micro-batch, decoder stages 29. With
    # every device leading, a stretch started on a decoder backward alone (the encoder had only
    # forwards ready) and the encoder waited for it to end; with the encoder leading, the
    # decoder's blocks fill the encoder's stretches and the last encoder stage idles less.
    spec = parse_file(ROOT / "bench" / "specs" / "real" / "ul2_nnshape16.tsl")

    def idle(sched, d):  # time device d runs nothing between its first and last own block
        own = [(s.start, s.end(spec)) for s in sched.slots if spec.block(s.block).devices == (d,)]
        first, last = min(a for a, _ in own), max(b for _, b in own)
        busy = sum(s.end(spec) - s.start for s in sched.slots
                   if d in spec.block(s.block).devices and first <= s.start < last)
        return last - first - busy

    plays = {}
    for share in (2, 10 ** 9):  # the encoder leads; every device leads
        got = [p for p in (_play(spec, 32, a, share=share) for a in range(32 + 16 + 1)) if p is not None]
        for p in got:
            validate(spec, p)
        plays[share] = min(got, key=lambda p: p.makespan(spec))
    assert idle(plays[2], 7) < idle(plays[10 ** 9], 7)
    assert plays[2].makespan(spec) < plays[10 ** 9].makespan(spec)


def test_room_kept_for_an_all_device_head_that_holds_memory():
    # A vocabulary-parallel head after the last stage holds memory on every device: stages that
    # filled themselves with forwards left it no room, and every play deadlocked. Each micro-batch
    # a device admits now keeps room for all it will allocate there.
    for mem in (20, 30, 40):
        spec = parse(_nn(mem, 16, head=True, enc=(6, 3, 13), dec=(9, 5, 17), emb=1), "nnh.tsl")
        got = lockstep(spec, 16, 10 ** 9)
        assert got is not None
        validate(spec, got)
        assert got.makespan(spec) >= makespan_bound(spec, 16)
