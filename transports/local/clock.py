"""The speaker's side of the local transport: a small jitter buffer read by the sound card's
callback, and the playout clock that callback keeps.

Positions count the bot's audio samples (at the device's rate) in the order they were written;
silence the callback plays while the buffer is empty has no position. Each callback records an
anchor: the positions of the samples it took and the moment the first of them reaches the DAC
(PortAudio's `outputBufferDacTime - currentTime`, the latency the device itself reports, added
to the callback's own monotonic time). `played(now)` is then the last position whose sample has
reached the DAC by `now`: what the speaker has played, not what was handed to it.

The buffer plays nothing until it holds `prefill_s` of audio (or writing has paused for
`prefill_s`, the tail of an utterance), so a late chunk is heard as one short silence and not as
a train of tiny gaps; an underrun (audio arriving soon after the buffer ran dry) is counted,
never raised.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass

import numpy as np

SOUND_LEVEL = 0.01  # |sample| above -40 dBFS: audible, where a voice's leading samples may be silence
GAP_S = 0.5  # audio written this soon after the buffer ran dry was late: an underrun
ANCHORS_KEPT = 1024  # callbacks of history: tens of seconds at the block sizes used here


@dataclass(frozen=True)
class Anchor:
    start: int  # position of the first real sample the callback took
    count: int  # real samples it took (the rest of its block was silence)
    dac_at: float  # time.monotonic() at which that first sample reaches the DAC


class PlayoutBuffer:
    """Mono float32 samples from the event loop to the output callback, and the clock of what
    has been played. Thread-safe: `write`/`clear` on the loop, `fill` on PortAudio's thread."""

    def __init__(self, sample_rate: int, *, capacity_s: float = 4.0, prefill_s: float = 0.03):
        if sample_rate <= 0:
            raise ValueError(f"sample_rate must be > 0, got {sample_rate}")
        if prefill_s < 0:
            raise ValueError(f"prefill_s must be >= 0, got {prefill_s}")
        self.sample_rate = sample_rate
        self._ring = np.zeros(int(capacity_s * sample_rate), dtype=np.float32)
        self._prefill = int(prefill_s * sample_rate)
        self._prefill_s = prefill_s
        self._lock = threading.Lock()
        self._read = 0  # position of the next sample the callback takes
        self._write = 0  # position after the last sample written
        self._playing = False  # past the prefill since the buffer last ran dry
        self._last_write_at = 0.0
        self._anchors: deque[Anchor] = deque(maxlen=ANCHORS_KEPT)
        self._sounds: deque[float] = deque(maxlen=ANCHORS_KEPT)  # DAC time of each block's first loud sample
        self._dry_at: float | None = None  # when the buffer last ran dry while playing
        self.underruns = 0  # times the buffer ran dry and audio came within GAP_S: a late chunk
        self.last_callback_at: float | None = None

    # -- the event loop's side -------------------------------------------------------------------
    @property
    def written(self) -> int:
        """Position after the last sample written (the start of whatever is written next)."""
        return self._write

    def buffered(self) -> int:
        with self._lock:
            return self._write - self._read

    def free(self) -> int:
        with self._lock:
            return len(self._ring) - (self._write - self._read)

    def write(self, samples: np.ndarray, now: float | None = None) -> None:
        """Append samples (1-D float32); ValueError if they do not fit (the caller waits for room)."""
        n = len(samples)
        with self._lock:
            if n > len(self._ring) - (self._write - self._read):
                raise ValueError(f"{n} samples do not fit in the playout buffer")
            i = self._write % len(self._ring)
            first = min(n, len(self._ring) - i)
            self._ring[i:i + first] = samples[:first]
            self._ring[:n - first] = samples[first:]
            self._write += n
            self._last_write_at = time.monotonic() if now is None else now
            if self._dry_at is not None and self._last_write_at - self._dry_at < GAP_S:
                self.underruns += 1
            self._dry_at = None

    def clear(self) -> None:
        """Drop what has not been played (an interruption): those samples never get played."""
        with self._lock:
            self._read = self._write
            self._playing = False

    # -- PortAudio's side ------------------------------------------------------------------------
    def fill(self, out: np.ndarray, dac_delay_s: float, now: float | None = None) -> None:
        """Fill `out` (frames x channels) for the DAC, `dac_delay_s` from `now` (monotonic)."""
        now = time.monotonic() if now is None else now
        frames = len(out)
        with self._lock:
            self.last_callback_at = now
            available = self._write - self._read
            if not self._playing and available and (
                    available >= self._prefill or now - self._last_write_at >= self._prefill_s):
                self._playing = True
            count = min(frames, available) if self._playing else 0
            if count:
                i = self._read % len(self._ring)
                first = min(count, len(self._ring) - i)
                block = np.concatenate((self._ring[i:i + first], self._ring[:count - first]))
                out[:count] = block[:, None]
                self._anchors.append(Anchor(self._read, count, now + dac_delay_s))
                loud = np.flatnonzero(np.abs(block) > SOUND_LEVEL)
                if len(loud):
                    self._sounds.append(now + dac_delay_s + loud[0] / self.sample_rate)
                self._read += count
            if self._playing and count < frames:
                self._playing = False  # ran dry: wait for the prefill again
                self._dry_at = now
        out[count:] = 0.0

    # -- the clock -------------------------------------------------------------------------------
    def played(self, now: float | None = None) -> int:
        """The position up to which the speaker has played by `now` (monotonic)."""
        now = time.monotonic() if now is None else now
        with self._lock:
            anchors = list(self._anchors)
        for a in reversed(anchors):
            if a.dac_at <= now:
                return a.start + min(a.count, int((now - a.dac_at) * self.sample_rate + 1e-6))
        return anchors[0].start if anchors else 0

    def audible_until(self) -> float:
        """Monotonic time at which the last sample taken so far leaves the speaker (0 if none),
        plus what is still buffered at the device's rate."""
        with self._lock:
            if not self._anchors:
                return 0.0
            a = self._anchors[-1]
            pending = self._write - self._read
        return a.dac_at + (a.count + pending) / self.sample_rate

    def onset_after(self, since: float) -> float | None:
        """The DAC time (monotonic) of the first audible sample (above SOUND_LEVEL) played after
        `since`: when the listener first hears the bot."""
        with self._lock:
            sounds = list(self._sounds)
        return next((t for t in sounds if t >= since), None)
