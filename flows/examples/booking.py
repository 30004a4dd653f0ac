"""The restaurant booking flow's functions (restaurant_booking.yaml names them).

Each tool is a pipecat.flows direct function: `flow_manager` first, then the arguments the LLM
fills in (their descriptions come from the docstring). Each returns `(result, TRANSITION_IN_YAML)`:
the flow file decides the next node, on the result's `status` where it branches.

`reservations` stands in for the restaurant's reservation system (in memory, not a real one);
replace `reservations.book` to connect a real system. Its `delay_s` makes it as slow as a remote
booking API, so the flow's filler is heard while it runs.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
from dataclasses import dataclass, field

from pipecat.flows import TRANSITION_IN_YAML, FlowManager

MAX_PARTY = 12
OPENING_HOURS = (dt.time(12, 0), dt.time(22, 0))


@dataclass(frozen=True)
class Booking:
    reference: str
    party_size: int
    date: str
    time: str
    name: str


@dataclass
class Reservations:
    """An in-memory reservation book (a stand-in for the restaurant's real system)."""

    delay_s: float = 0.0
    full_slots: set[tuple[str, str]] = field(default_factory=set)
    bookings: list[Booking] = field(default_factory=list)
    _numbers: itertools.count = field(default_factory=lambda: itertools.count(101))

    async def book(self, party_size: int, date: str, time: str, name: str) -> Booking | None:
        """The booking, or None when that slot is full."""
        await asyncio.sleep(self.delay_s)
        if (date, time) in self.full_slots:
            return None
        booking = Booking(f"TC-{next(self._numbers)}", party_size, date, time, name)
        self.bookings.append(booking)
        return booking


reservations = Reservations()


async def record_party_size(flow_manager: FlowManager, party_size: int) -> tuple[dict, object]:
    """Record how many people the table is for.

    Args:
        party_size: The number of guests, from 1 to 12.
    """
    if not 1 <= party_size <= MAX_PARTY:
        return {"status": "invalid", "error": f"we seat parties of 1 to {MAX_PARTY}"}, TRANSITION_IN_YAML
    flow_manager.state["party_size"] = party_size
    return {"status": "ok", "party_size": party_size}, TRANSITION_IN_YAML


async def record_date_and_time(flow_manager: FlowManager, date: str, time: str) -> tuple[dict, object]:
    """Record when the table is wanted.

    Args:
        date: The date, as YYYY-MM-DD.
        time: The time, as HH:MM on a 24-hour clock, between 12:00 and 22:00.
    """
    try:
        dt.date.fromisoformat(date)
        wanted = dt.time.fromisoformat(time)
    except ValueError:
        return {"status": "invalid", "error": "give the date as YYYY-MM-DD and the time as HH:MM"}, TRANSITION_IN_YAML
    if not OPENING_HOURS[0] <= wanted <= OPENING_HOURS[1]:
        return {"status": "invalid", "error": "we take bookings from 12:00 to 22:00"}, TRANSITION_IN_YAML
    flow_manager.state.update(date=date, time=time)
    return {"status": "ok", "date": date, "time": time}, TRANSITION_IN_YAML


async def record_name(flow_manager: FlowManager, name: str) -> tuple[dict, object]:
    """Record the name the booking is under.

    Args:
        name: The caller's name.
    """
    if not name.strip():
        return {"status": "invalid", "error": "a name is needed"}, TRANSITION_IN_YAML
    flow_manager.state["name"] = name.strip()
    return {"status": "ok", "name": name.strip()}, TRANSITION_IN_YAML


async def book_table(flow_manager: FlowManager, party_size: int, date: str, time: str,
                     name: str) -> tuple[dict, object]:
    """Book the table, once the caller has confirmed the details.

    Args:
        party_size: The number of guests.
        date: The date, as YYYY-MM-DD.
        time: The time, as HH:MM.
        name: The name the booking is under.
    """
    booking = await reservations.book(party_size, date, time, name)
    if booking is None:
        return {"status": "full", "error": f"{date} at {time} is fully booked"}, TRANSITION_IN_YAML
    flow_manager.state["reference"] = booking.reference
    return {"status": "booked", "reference": booking.reference}, TRANSITION_IN_YAML
