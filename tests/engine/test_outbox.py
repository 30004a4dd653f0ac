"""engine/outbox.py: the engine thread's events reach each event loop in one wake-up per flush, in order."""

from __future__ import annotations

import asyncio
import threading

from tts_engine.engine import outbox
from tts_engine.engine.outbox import Outbox


class Receiver:
    def __init__(self, loop):
        self.loop = loop
        self.got: list[object] = []

    def receive(self, event) -> None:
        assert threading.current_thread() is threading.main_thread()  # on its loop's thread
        self.got.append(event)


def test_one_wakeup_per_loop_per_flush_and_order_kept():
    async def main():
        loop = asyncio.get_running_loop()
        a, b = Receiver(loop), Receiver(loop)
        calls = []
        real = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = lambda *args: (calls.append(args), real(*args))[1]
        box = Outbox()

        def engine_thread():
            for i in range(5):
                box.post(a, ("a", i))
                box.post(b, ("b", i))
            assert len(box) == 10
            box.flush()
            box.flush()  # nothing pending: no wake-up

        t = threading.Thread(target=engine_thread)
        t.start()
        await asyncio.to_thread(t.join)
        await asyncio.sleep(0.01)
        assert [c[0] for c in calls].count(outbox._receive_all) == 1 and len(box) == 0
        assert a.got == [("a", i) for i in range(5)] and b.got == [("b", i) for i in range(5)]

    asyncio.run(main())


def test_a_closed_loop_drops_its_events_quietly():
    loop = asyncio.new_event_loop()
    loop.close()
    box = Outbox()
    box.post(Receiver(loop), "late")
    box.flush()
    assert len(box) == 0
