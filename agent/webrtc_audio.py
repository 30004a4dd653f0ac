"""WebRTC audio for the agent: received audio goes on as each packet arrives, sent audio leaves in 10 ms
packets, and an interruption silences the bot at once.

aiortc's audio receiver holds four packets (80 ms) before it hands the first one on, and waits for a
missing packet until its buffer overflows (16 packets, 320 ms). That buffer is for playout, where it
smooths jitter; the agent does not play what it receives, it feeds the VAD and the recogniser, so
the held packets are only a delay: the end of every user's sentence would reach the turn-taking
80 ms late, and so would the start of every interruption, and one lost packet would stall both for
a third of a second. An audio RTP packet is a whole frame (Opus, G.711), so the agent's receivers
hand each packet on as it arrives. A packet older than one already handed on is late: the decoder
has moved past it, and it is dropped (the recogniser hears a 20 ms gap, as it would on a loss).

The benchmark's listeners do play what they hear, so theirs hold one packet, as a browser's adaptive
buffer does on a clean link.

aiortc has no setting for either (the receiver builds its buffer itself), so the receiver module's
class is replaced once per process.

Sent audio goes out in 10 ms Opus packets, not aiortc's 20 ms: a piece of the bot's audio leaves with the
next 10 ms tick instead of waiting for a second piece to fill its packet, and a listener's buffer of one
packet holds 10 ms instead of 20. aiortc fixes the packet length in its encoder, so the encoder class is
replaced once per process, as the receivers are.

pipecat's SmallWebRTC output hands its track one write of audio (40 ms by default) and
waits until the track has sent it. On an interruption pipecat drops what it has queued but lets that
write play out, so the user hears up to 40 ms more of the bot after it was interrupted. The output
class is replaced once per process by one that also empties the track on an interruption, unless the
write is of audio that must not be interrupted.
"""

from __future__ import annotations

LISTENER_PREFETCH = 1  # packets a listener holds
OPUS_RATE = 48000  # Opus's clock, whatever the audio's rate
_policy = ["aiortc"]  # what audio receivers made from now on in this process do: "arrival" or "one packet"


def arrival_audio_receivers() -> None:
    """From now on, every aiortc audio receiver made in this process hands on each packet as it arrives
    and drops one that comes after a later packet (video receivers are unchanged). For the agent's input."""
    _install("arrival")


def one_packet_audio_receivers() -> None:
    """From now on, every aiortc audio receiver made in this process hands on each packet once the next
    one shows it complete (video receivers are unchanged). For the benchmark's listeners."""
    _install("one packet")


def _install(policy: str) -> None:
    """Idempotent. A process has one role (agent or listener); where it has both (a test run), each
    receiver gets the policy of the latest call before it was made."""
    import aiortc.rtcrtpreceiver as receiver
    from aiortc.jitterbuffer import JitterFrame
    from aiortc.utils import uint16_add

    _policy[0] = policy
    if getattr(receiver.JitterBuffer, "cadence_audio", False):
        return

    class CadenceAudio(receiver.JitterBuffer):
        cadence_audio = True

        def __init__(self, capacity: int, prefetch: int = 0, is_video: bool = False):
            self.policy = "video" if is_video else _policy[0]
            super().__init__(capacity, LISTENER_PREFETCH if self.policy == "one packet" else prefetch, is_video)
            self._next: int | None = None  # arrival: the sequence number after the last packet handed on

        def add(self, packet):
            if self.policy != "arrival":
                return super().add(packet)
            if self._next is not None and uint16_add(packet.sequence_number, -self._next) >= 0x8000:
                return False, None  # late (or a duplicate)
            self._next = uint16_add(packet.sequence_number, 1)
            return False, JitterFrame(data=packet._data, timestamp=packet.timestamp)

    receiver.JitterBuffer = CadenceAudio


def ten_ms_opus_packets() -> None:
    """From now on, every aiortc Opus encoder made in this process packs 10 ms of audio a packet (libopus's
    frame_duration, and the resampler that cuts its input). Idempotent."""
    import aiortc.codecs as codecs
    from av import AudioResampler

    if getattr(codecs.OpusEncoder, "ten_ms", False):
        return

    class TenMsOpus(codecs.OpusEncoder):
        ten_ms = True

        def __init__(self):
            super().__init__()
            self.codec.options = {**self.codec.options, "frame_duration": "10"}
            self.resampler = AudioResampler(format="s16", layout="stereo", rate=OPUS_RATE,
                                            frame_size=OPUS_RATE // 100)

    codecs.OpusEncoder = TenMsOpus


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
