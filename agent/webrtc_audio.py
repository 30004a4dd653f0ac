"""Received WebRTC audio goes on as soon as each packet is known complete.

aiortc's audio receiver holds four packets (80 ms) before it hands the first one on. That buffer is
for playout, where it smooths jitter; the agent does not play what it receives, it feeds the VAD and
the recogniser, so the four packets are only a delay: the end of every user's sentence reaches the
turn-taking 60 ms late, and so does the start of every interruption. With one packet a frame leaves
when the next packet shows it whole. Loss and reordering are handled as before: the buffer still
waits for a missing packet until it overflows (16 packets), whatever the prefetch.

aiortc has no setting for it (the receiver builds its buffer itself), so the receiver module's class
is replaced once per process by one whose audio prefetch is one packet. The benchmark's listeners
use the same, as a browser's adaptive buffer holds about one packet on a clean link.
"""

from __future__ import annotations

AUDIO_PREFETCH = 1  # packets


def one_packet_audio_receivers() -> None:
    """From now on, every aiortc audio receiver in this process hands on each packet once the next
    one shows it complete (video receivers are unchanged). Idempotent."""
    import aiortc.rtcrtpreceiver as receiver

    if getattr(receiver.JitterBuffer, "one_packet", False):
        return

    class OnePacketAudio(receiver.JitterBuffer):
        one_packet = True

        def __init__(self, capacity: int, prefetch: int = 0, is_video: bool = False):
            super().__init__(capacity, prefetch if is_video else AUDIO_PREFETCH, is_video)

    receiver.JitterBuffer = OnePacketAudio
