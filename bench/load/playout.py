"""Zero-buffer playout simulation (serving.md).

Playback starts the moment the first playable PCM arrives. Each chunk extends the playout deadline
by its duration; a chunk that arrives after the deadline (any lateness > 0) is an underrun: the
listener hears a stall of (arrival - deadline) and the clock shifts, so later chunks are judged
against the shifted deadline. Times are seconds on one clock (the request's time zero).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Chunk:
    at_s: float  # arrival time of the chunk's bytes
    samples: int  # whole samples it completes (a chunk that completes none is not playable)


@dataclass(frozen=True)
class Stall:
    at_s: float  # when the listener ran dry (the deadline that was missed)
    length_s: float  # how long nothing played
    chunk: int  # index (in the input sequence) of the late chunk


@dataclass
class Playout:
    start_s: float | None  # first playable arrival; None: nothing playable
    end_s: float | None  # when the last sample finishes playing
    samples: int
    chunk_starts_s: list[float] = field(default_factory=list)  # play time of each chunk's first sample
    stalls: list[Stall] = field(default_factory=list)

    @property
    def underruns(self) -> int:
        return len(self.stalls)

    @property
    def stall_total_s(self) -> float:
        return sum(s.length_s for s in self.stalls)

    @property
    def stall_max_s(self) -> float:
        return max((s.length_s for s in self.stalls), default=0.0)


def simulate(chunks: Sequence[Chunk], sample_rate: int) -> Playout:
    """Play `chunks` (in arrival order) through a zero-buffer player."""
    play = Playout(start_s=None, end_s=None, samples=0)
    deadline = 0.0
    for i, chunk in enumerate(chunks):
        if chunk.samples <= 0:
            play.chunk_starts_s.append(deadline if play.start_s is not None else chunk.at_s)
            continue
        if play.start_s is None:
            play.start_s = chunk.at_s
            deadline = chunk.at_s
        elif chunk.at_s > deadline:
            play.stalls.append(Stall(deadline, chunk.at_s - deadline, i))
            deadline = chunk.at_s
        play.chunk_starts_s.append(deadline)
        deadline += chunk.samples / sample_rate
        play.samples += chunk.samples
    play.end_s = deadline if play.start_s is not None else None
    return play


def play_time_of_sample(play: Playout, chunks: Sequence[Chunk], sample: int, sample_rate: int) -> float | None:
    """When sample number `sample` (0-based, over the whole stream) is heard; None if never."""
    first = 0
    for chunk, start in zip(chunks, play.chunk_starts_s):
        if chunk.samples > 0 and sample < first + chunk.samples:
            return start + (sample - first) / sample_rate
        first += max(chunk.samples, 0)
    return None
