"""The read-ahead's queue (:class:`Handoff`): bounded, first in first out, and never
left locked by an exception (a Ctrl-C or a SIGTERM handler's ``SystemExit`` lands
where the consumer waits: in it). tests/pipeline/test_shutdown.py sends the signals."""

from __future__ import annotations

import queue
import threading
import time

import pytest

from headrace.pipeline._prefetch import Handoff


def test_items_come_out_in_order_and_the_bound_holds() -> None:
    h = Handoff(2)
    assert h.put("a", 0.0) and h.put("b", 0.0)
    assert h.full()
    assert not h.put("c", 0.01)  # no room: refused after the timeout
    assert h.get() == "a"
    assert h.put("c", 0.0)
    assert [h.get(), h.get()] == ["b", "c"]
    with pytest.raises(queue.Empty):
        h.get()
    with pytest.raises(queue.Empty):
        h.get(0.02)


def test_a_waiting_consumer_wakes_when_an_item_arrives() -> None:
    h = Handoff(1)
    got: list[object] = []
    consumer = threading.Thread(target=lambda: got.append(h.get(10.0)))
    consumer.start()
    time.sleep(0.05)
    h.put("x", 0.0)
    consumer.join(5)
    assert got == ["x"]


def test_clearing_wakes_a_producer_waiting_for_room_and_put_now_ignores_the_bound() -> None:
    h = Handoff(1)
    h.put(1, 0.0)
    put: list[bool] = []
    producer = threading.Thread(target=lambda: put.append(h.put(2, 10.0)))
    producer.start()
    time.sleep(0.05)
    assert put == []  # waiting for room
    h.clear()
    producer.join(5)
    assert put == [True] and h.get() == 2
    h.put(3, 0.0)
    h.put_now("stale")  # beyond maxsize: what a stop leaves for a consumer
    assert [h.get(), h.get()] == [3, "stale"]


def test_an_exception_inside_a_wait_leaves_it_usable() -> None:
    # What a signal handler does to a waiting consumer, raised from inside the wait.
    h = Handoff(1)

    class Interrupted(Exception):
        pass

    real = h._arrived

    class Raising:
        def acquire(self, timeout: float) -> bool:
            raise Interrupted

    h._arrived = Raising()  # type: ignore[assignment]
    with pytest.raises(Interrupted):
        h.get(1.0)
    h._arrived = real
    h.put("after", 0.0)
    assert h.get(1.0) == "after"
