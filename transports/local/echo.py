"""What the microphone may hear while the bot speaks through the machine's own speaker.

Three modes (`cadence talk`): "gate" (the default) mutes the microphone from the moment the bot's
audio is written until `tail_s` after its last sample has left the speaker, so the bot never
interrupts itself but cannot be interrupted either; "aec" passes the microphone through WebRTC's
acoustic echo canceller (AEC3, from the `aec-audio-processing` package; fed what the speaker
played as the far end), so the user can barge in without headphones; "headphones" passes the
microphone as is (no echo path), so barge-in is full-duplex.
"""

from __future__ import annotations

import numpy as np

MODES = ("gate", "aec", "headphones")
AEC_RATE = 16000
AEC_FRAME = 160  # 10 ms at 16 kHz: WebRTC's audio processing works on 10 ms frames


class EchoGate:
    """The default: silence the microphone while the bot is audible (plus a room tail)."""

    def __init__(self, audible_until, *, tail_s: float = 0.3):
        """`audible_until()` -> monotonic time the bot's last sample leaves the speaker."""
        if tail_s < 0:
            raise ValueError(f"tail_s must be >= 0, got {tail_s}")
        self._audible_until = audible_until
        self._tail_s = tail_s

    def muted(self, now: float) -> bool:
        return now < self._audible_until() + self._tail_s

    def process(self, near: np.ndarray, now: float) -> np.ndarray:
        return np.zeros_like(near) if self.muted(now) else near


def webrtc_canceller():
    """WebRTC's audio-processing module (AEC3, through the `aec-audio-processing` package), echo
    cancellation only; ValueError naming the fix when the package is missing."""
    try:
        from aec_audio_processing import AudioProcessor
    except ImportError as e:
        raise ValueError(f"--aec needs the aec-audio-processing package ({e}): "
                         "pip install aec-audio-processing==1.0.1") from None
    return WebRTCCanceller(AudioProcessor(enable_aec=True, enable_ns=False, enable_agc=False, enable_vad=False))


class WebRTCCanceller:
    """One 10 ms frame at a time: the far end (what the speaker played) first, then the near end."""

    def __init__(self, processor):
        self._ap = processor
        self._ap.set_stream_format(AEC_RATE, 1)
        self._ap.set_reverse_stream_format(AEC_RATE, 1)
        self._ap.set_stream_delay(0)  # the far end is aligned by time already; AEC3 finds the rest

    def process(self, near: bytes, far: bytes) -> bytes:
        self._ap.process_reverse_stream(far)
        return self._ap.process_stream(near)


class EchoCanceller:
    """Cancels the speaker's audio (the far end) out of the microphone (the near end), both mono
    int16 at 16 kHz, in 10 ms frames. The far end is what the output callback played, silence
    included, stamped with the DAC time of its first sample; each microphone block comes with the
    ADC time of its first sample. A near frame is paired with the far audio that was playing when
    it was captured, so the echo the canceller must find is only the room's delay (never
    non-causal, whatever the two streams' latencies and start times). During the call's first
    WARMUP_S of bot speech, while the canceller is still finding the echo path, the microphone is
    muted over the bot's voice (the gate), so an early leak does not interrupt the bot."""

    RESYNC_S = 0.02  # re-align when the pairing drifts by more than this (an xrun, a clock step)
    WARMUP_S = 2.0  # the canceller finds the echo path within its first seconds of far-end speech:
    FAR_LEVEL = 100  # until then, frames over far-end speech (|sample| > this, int16) are muted

    def __init__(self, canceller=None):
        self._aec = canceller if canceller is not None else webrtc_canceller()
        self._far = np.zeros(0, dtype=np.int16)
        self._far_at: float | None = None  # DAC time of self._far[0]
        self._near = np.zeros(0, dtype=np.int16)
        self._near_at: float | None = None  # ADC time of self._near[0]
        self._far_heard_s = 0.0  # far-end speech the canceller has adapted on so far

    def add_far(self, samples: np.ndarray, dac_at: float) -> None:
        if self._far_at is None or not len(self._far):
            self._far, self._far_at = samples.astype(np.int16, copy=False), dac_at
        else:
            self._far = np.concatenate((self._far, samples.astype(np.int16, copy=False)))
        if len(self._far) > 4 * AEC_RATE:  # the microphone stalled: keep the last seconds
            cut = len(self._far) - 2 * AEC_RATE
            self._far, self._far_at = self._far[cut:], self._far_at + cut / AEC_RATE

    def _align(self) -> None:
        """Drop far audio played before the next near sample was captured, or pad silence when
        the next near sample was captured before any far audio played."""
        if self._far_at is None or self._near_at is None:
            return
        skew = self._near_at - self._far_at
        if abs(skew) <= self.RESYNC_S:
            return
        n = round(skew * AEC_RATE)
        if n > 0:
            self._far = self._far[n:]
        else:
            self._far = np.concatenate((np.zeros(-n, dtype=np.int16), self._far))
        self._far_at += n / AEC_RATE

    def _take_far(self, n: int) -> np.ndarray:
        far = self._far[:n]
        self._far = self._far[len(far):]
        if self._far_at is not None:
            self._far_at += n / AEC_RATE
        if len(far) < n:  # nothing played yet: silence is the far end
            far = np.concatenate((far, np.zeros(n - len(far), dtype=np.int16)))
        return far

    def process(self, near: np.ndarray, adc_at: float) -> np.ndarray:
        """Near-end int16 samples captured from `adc_at` on; the cancelled samples out, whole
        frames only (the rest waits for the next block)."""
        if not len(self._near):
            self._near_at = adc_at
        self._near = np.concatenate((self._near, near.astype(np.int16, copy=False)))
        whole = len(self._near) // AEC_FRAME * AEC_FRAME
        out = []
        for i in range(0, whole, AEC_FRAME):
            self._align()
            far = self._take_far(AEC_FRAME)
            cleaned = np.frombuffer(self._aec.process(self._near[i:i + AEC_FRAME].tobytes(), far.tobytes()),
                                    dtype=np.int16)
            if np.abs(far).max() > self.FAR_LEVEL:
                self._far_heard_s += AEC_FRAME / AEC_RATE
                if self._far_heard_s < self.WARMUP_S:
                    cleaned = np.zeros_like(cleaned)  # not converged yet: its leak would be heard as speech
            out.append(cleaned)
            self._near_at += AEC_FRAME / AEC_RATE
        self._near = self._near[whole:]
        return np.concatenate(out) if out else np.zeros(0, dtype=np.int16)
