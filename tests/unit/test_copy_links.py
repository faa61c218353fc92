"""The copy-engine transport's bookkeeping (executor/copy_links.py), without any process group:
message layout in a slot, how many slots a link needs, and the settings' checks."""
import pytest

torch = pytest.importorskip("torch")

from tessel_dsl.executor import copy_links  # noqa: E402
from tessel_dsl.executor.copy_links import ALIGN, Region, layout, slots_needed  # noqa: E402


def test_each_tensor_of_a_message_starts_on_an_aligned_byte():
    offsets, total = layout([10, ALIGN, 1, 0])
    assert offsets == [0, ALIGN, 2 * ALIGN, 3 * ALIGN]
    assert total == 3 * ALIGN


def test_messages_go_round_their_links_slots():
    r = Region(base=1000, slots=3, slot_bytes=512)
    assert [r.at(q) for q in range(5)] == [1000, 1512, 2024, 1000, 1512]


def test_waiting_in_sending_order_needs_one_slot():
    order = list("abcde")
    assert slots_needed(order, order) == 1


def test_a_wait_ahead_of_older_messages_needs_room_for_them():
    # "c" is waited for while "a" and "b" still sit in their slots: three slots, else "c" would
    # need the slot "a" holds, and "a" is only taken after "c".
    assert slots_needed(list("abcd"), list("cabd")) == 3
    assert slots_needed(list("abcd"), list("badc")) == 2
    # Once the oldest are taken, the distance counts from the oldest still held.
    assert slots_needed(list("abcdef"), list("abdcfe")) == 2


def test_settings_are_checked(monkeypatch):
    monkeypatch.setenv("TESSEL_TRANSPORT", "rdma")
    with pytest.raises(ValueError, match="TESSEL_TRANSPORT"):
        copy_links.transport_mode()
    monkeypatch.setenv("TESSEL_TRANSPORT", "copy")
    assert copy_links.transport_mode() == "copy"
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("TESSEL_COPY_SLOTS", bad)
        with pytest.raises(ValueError, match="TESSEL_COPY_SLOTS"):
            copy_links.min_slots()
    monkeypatch.setenv("TESSEL_COPY_SLOTS", "2")
    assert copy_links.min_slots() == 2


class _Runner:
    """Just what `open_copy_links` reads before it talks to any peer."""

    def __init__(self, device):
        self.device = torch.device(device)


@pytest.mark.parametrize("mode,device", [("nccl", "cpu"), ("auto", "cpu")])
def test_the_process_groups_transfers_stay_where_copy_is_not_asked_for_or_cannot_apply(mode, device):
    # No collective is entered (there is no process group here): the decision is local and the same on every rank.
    assert copy_links.open_copy_links(_Runner(device), None, (0,), mode) is None


def test_auto_declines_across_hosts_and_without_peer_access(monkeypatch):
    from tessel_dsl.program import Action, Op, Program

    class R:
        program = Program(0, (Action(Op.SEND, "F0", 0, (1,)),))

    monkeypatch.setattr(copy_links.dist, "get_rank", lambda *a: 0)
    one_host = [(0, 0, {}, ("h", 0)), (1, 1, {}, ("h", 1))]
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda a, b: True, raising=False)
    assert copy_links._cannot_map(one_host, R, (0, 1)) is None
    monkeypatch.setattr(torch.cuda, "can_device_access_peer", lambda a, b: False, raising=False)
    assert "cannot map the memory of GPU 1" in copy_links._cannot_map(one_host, R, (0, 1))
    two_hosts = [(0, 0, {}, ("a", 0)), (1, 1, {}, ("b", 0))]
    assert "several hosts" in copy_links._cannot_map(two_hosts, R, (0, 1))
