"""What differs between carriers, in one table: the serializer pipecat ships for each, the key that
names the stream in their messages, and how a playout acknowledgement is asked for and comes back.

Twilio, Telnyx and Exotel echo a `mark` once the audio sent before it has been played to the
caller; Plivo's counterpart is a `checkpoint` answered by `playedStream`. Exotel's audio is 16-bit
linear PCM at 8 kHz rather than G.711 (its serializer knows). The serializers never call the
carrier's REST API here (`auto_hang_up=False`): a call ends when the carrier closes the stream.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipecat.serializers.base_serializer import FrameSerializer

CARRIERS = ("twilio", "telnyx", "plivo", "exotel")


@dataclass(frozen=True)
class Carrier:
    name: str
    stream_key: str  # the key of the stream id in the carrier's messages
    ack_event: str  # the event the carrier sends back when a mark has been played

    def mark_message(self, stream_id: str, name: str) -> dict:
        if self.name == "plivo":
            return {"event": "checkpoint", "streamId": stream_id, "name": name}
        return {"event": "mark", self.stream_key: stream_id, "mark": {"name": name}}

    def acked_name(self, message: dict) -> str | None:
        """The mark name an acknowledgement carries, or None."""
        if self.name == "plivo":
            name = message.get("name")
        else:
            mark = message.get("mark")
            name = mark.get("name") if isinstance(mark, dict) else None
        return name if isinstance(name, str) else None


CARRIER = {
    "twilio": Carrier("twilio", "streamSid", "mark"),
    "telnyx": Carrier("telnyx", "stream_id", "mark"),
    "plivo": Carrier("plivo", "streamId", "playedStream"),
    "exotel": Carrier("exotel", "stream_sid", "mark"),
}


def make_serializer(carrier: str, call_data) -> FrameSerializer:
    """pipecat's serializer for the call `parse_telephony_websocket` described (8 kHz G.711)."""
    stream_id, call_id = call_data.get("stream_id"), call_data.get("call_id")
    if not isinstance(stream_id, str) or not stream_id:
        raise ValueError(f"the {carrier} start message names no stream id")
    if carrier == "twilio":
        from pipecat.serializers.twilio import TwilioFrameSerializer

        return TwilioFrameSerializer(stream_id, call_id, params=TwilioFrameSerializer.InputParams(auto_hang_up=False))
    if carrier == "telnyx":
        from pipecat.serializers.telnyx import TelnyxFrameSerializer

        encoding = call_data.get("outbound_encoding") or "PCMU"
        if encoding not in ("PCMU", "PCMA"):
            raise ValueError(f"Telnyx stream encoding must be PCMU or PCMA, got {encoding!r}")
        return TelnyxFrameSerializer(stream_id, outbound_encoding=encoding, inbound_encoding=encoding,
                                     call_control_id=call_id,
                                     params=TelnyxFrameSerializer.InputParams(auto_hang_up=False))
    if carrier == "plivo":
        from pipecat.serializers.plivo import PlivoFrameSerializer

        return PlivoFrameSerializer(stream_id, call_id, params=PlivoFrameSerializer.InputParams(auto_hang_up=False))
    if carrier == "exotel":  # it never calls Exotel's API: nothing to turn off
        from pipecat.serializers.exotel import ExotelFrameSerializer

        return ExotelFrameSerializer(stream_id, call_id)
    raise ValueError(f"not a carrier media stream this endpoint speaks ({', '.join(CARRIERS)}): {carrier!r}")
