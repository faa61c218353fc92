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
