"""When the message manager posts receives (``TESSEL_RECV_POST``), without a process group:
`dist.irecv` is replaced by a recorder, so the test sees exactly which receives start when."""
import pytest
import torch

from tessel_dsl.executor import comm
from tessel_dsl.executor.model_api import TensorMeta


class _Done:
    def wait(self, *_):
        return True


@pytest.fixture
def posted(monkeypatch):
    calls = []

    def irecv(buf, src, group=None, tag=0):
        calls.append((src, tag))
        return _Done()

    monkeypatch.setattr(comm.dist, "irecv", irecv)
    return calls


def _manager(post):
    return comm.MessageManager(torch.device("cpu"), 5.0, {"A": 0, "B": 1}, rank=1, post=post)


META = (TensorMeta((2, 2), torch.float32),)


def test_due_receives_start_at_their_wait_with_the_earlier_ones_of_their_link(posted):
    m = _manager("due")
    m.post_recv("A", 0, META, 0)
    m.post_recv("A", 1, META, 0)
    m.post_recv("B", 0, META, 2)
    assert posted == []  # noted only
    out = m.wait_recv("A", 1)  # A:0 came first on link 0 -> 1, so it starts first
    assert out[0].shape == (2, 2)
    assert posted == [(0, m._tag("A", 0, 0)), (0, m._tag("A", 1, 0))]
    m.wait_recv("A", 0)  # already started: nothing new
    assert len(posted) == 2
    m.drain()  # B:0 was never waited for: started and finished at the end of the step
    assert posted[-1] == (2, m._tag("B", 0, 0)) and not m.recvs


def test_ahead_receives_start_at_once(posted):
    m = _manager("ahead")
    m.post_recv("A", 0, META, 0)
    assert posted == [(0, m._tag("A", 0, 0))]


def test_an_unknown_mode_is_refused(monkeypatch):
    monkeypatch.setenv("TESSEL_RECV_POST", "soon")
    with pytest.raises(ValueError, match="TESSEL_RECV_POST"):
        comm.recv_post_mode()
    with pytest.raises(ValueError, match="receive posting"):
        _manager("later")


def test_lead_receives_start_early_once_with_the_earlier_ones_of_their_link(posted):
    m = _manager("lead")
    m.post_recv("A", 0, META, 0)
    m.post_recv("A", 1, META, 0)
    assert posted == []  # noted, like "due"
    m.start_early("A", 1)
    assert posted == [(0, m._tag("A", 0, 0)), (0, m._tag("A", 1, 0))]
    m.start_early("A", 1)  # already started
    m.wait_recv("A", 0)
    m.wait_recv("A", 1)
    assert len(posted) == 2 and not m.recvs


def test_lead_starts_a_receive_at_the_compute_before_the_one_that_needs_it():
    from tessel_dsl.executor.runtime import early_receives
    from tessel_dsl.program import Program

    # Device 1 of a two-stage 1F1B: F0:1 is noted before B1:0 runs and waited for right after it,
    # so it starts at B1:0; F0:2 is noted only after B1:1 was issued, so it waits for its WAIT.
    text = ("RECV F0:0<0 RECV F0:1<0 WAIT F0:0<0 F1:0 B1:0 SEND B1:0>0 WAIT F0:1<0 F1:1 B1:1 "
            "RECV F0:2<0 SEND B1:1>0 WAIT F0:2<0 F1:2 B1:2 SEND B1:2>0")
    acts = Program.from_text(1, text, False).actions
    early = early_receives(acts)
    at = {str(acts[i]): keys for i, keys in early.items()}
    assert at == {"B1:0": [("F0", 1)]}


def test_each_link_and_direction_gets_its_own_stream(monkeypatch):
    # A send kernel that waits for a late peer must not hold up another link's transfers: with
    # one stream per (direction, peer) it doesn't; "one" is the single shared stream of before.
    monkeypatch.setattr(comm.torch.cuda, "Stream", lambda device: object())
    m = comm.MessageManager(torch.device("cuda"), 5.0, {"A": 0}, rank=1, streams_mode="link")
    streams = {key: m.stream(*key) for key in [("send", 0), ("send", 2), ("recv", 0), ("recv", 2)]}
    assert len({id(s) for s in streams.values()}) == 4
    assert m.stream("send", 0) is streams[("send", 0)]  # made once, reused
    one = comm.MessageManager(torch.device("cuda"), 5.0, {"A": 0}, rank=1, streams_mode="one")
    assert one.stream("send", 0) is one.stream("recv", 2)
    assert _manager("due").stream("send", 0) is None  # the CPU has no streams


def test_one_shared_stream_is_the_default(monkeypatch):
    monkeypatch.delenv("TESSEL_COMM_STREAMS", raising=False)
    assert comm.comm_streams_mode() == "one"


def test_an_unknown_stream_mode_is_refused(monkeypatch):
    monkeypatch.setenv("TESSEL_COMM_STREAMS", "many")
    with pytest.raises(ValueError, match="TESSEL_COMM_STREAMS"):
        comm.comm_streams_mode()


def test_a_bad_setting_is_one_error_before_any_rank_starts(monkeypatch):
    from tessel_dsl.errors import ExecutionError
    from tessel_dsl.executor import launch

    monkeypatch.setenv("TESSEL_COMM_STREAMS", "many")
    with pytest.raises(ExecutionError, match="TESSEL_COMM_STREAMS must be one of one, link"):
        launch._check_settings()
    monkeypatch.setenv("TESSEL_COMM_STREAMS", "link")
    monkeypatch.setenv("TESSEL_RECV_POST", "soon")
    with pytest.raises(ExecutionError, match="TESSEL_RECV_POST"):
        launch._check_settings()
