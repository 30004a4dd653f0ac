"""WebRTC audio for the agent: received audio goes on as soon as each packet is known complete, and
an interruption silences the bot at once.

aiortc's audio receiver holds four packets (80 ms) before it hands the first one on. That buffer is
for playout, where it smooths jitter; the agent does not play what it receives, it feeds the VAD and
the recogniser, so the four packets are only a delay: the end of every user's sentence reaches the
turn-taking 60 ms late, and so does the start of every interruption. With one packet a frame leaves
when the next packet shows it whole. Loss and reordering are handled as before: the buffer still
waits for a missing packet until it overflows (16 packets), whatever the prefetch.

aiortc has no setting for it (the receiver builds its buffer itself), so the receiver module's class
is replaced once per process by one whose audio prefetch is one packet. The benchmark's listeners
use the same, as a browser's adaptive buffer holds about one packet on a clean link.

Sent audio: pipecat's SmallWebRTC output hands its track one write of audio (40 ms by default) and
waits until the track has sent it. On an interruption pipecat drops what it has queued but lets that
write play out, so the user hears up to 40 ms more of the bot after it was interrupted. The output
class is replaced once per process by one that also empties the track on an interruption, unless the
write is of audio that must not be interrupted.
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


def interruptions_empty_the_track() -> None:
    """From now on, every SmallWebRTC output in this process drops the audio its track still holds when
    an interruption comes (audio marked not interruptible plays on). Idempotent."""
    import pipecat.transports.smallwebrtc.transport as webrtc
    from pipecat.frames.frames import InterruptionFrame

    if getattr(webrtc.SmallWebRTCOutputTransport, "empties_track", False):
        return

    class EmptyingOutput(webrtc.SmallWebRTCOutputTransport):
        empties_track = True
        _writing_interruptible = True

        async def write_audio_frame(self, frame) -> bool:
            self._writing_interruptible = frame.interruptible
            return await super().write_audio_frame(frame)

        async def process_frame(self, frame, direction):
            await super().process_frame(frame, direction)  # pipecat empties its own queue first
            if isinstance(frame, InterruptionFrame) and self._writing_interruptible:
                empty_track(getattr(self._client, "_audio_output_track", None))

    webrtc.SmallWebRTCOutputTransport = EmptyingOutput


def empty_track(track) -> int:
    """Drop the 10 ms pieces an output track has not sent yet; the write waiting on them is told they
    went. Returns how many were dropped."""
    queue = getattr(track, "_chunk_queue", None)
    dropped = 0
    while queue:
        _chunk, done = queue.popleft()
        dropped += 1
        if done is not None and not done.done():
            done.set_result(True)
    return dropped
