"""What one caller heard, turned into per-turn figures. Pure arithmetic on monotonic milliseconds.

A caller's `Heard` is its played audio as (start, end, rms) pieces in its own play-out time: for
WebRTC each decoded frame when aiortc hands it over (the transport sends digital silence when it
has nothing); for a carrier leg each media chunk when its jitter buffer plays it (right after the
previous one, or on arrival if that is later: a gap), cut short by a `clear`.

Per turn, from the agent's stamps (stand_in.py) and the caller's own notes:
- token_to_audio_ms: the LLM's first token -> the first audible bot audio at the caller;
- token_to_tts_ms: the LLM's first token -> the engine's first audio at the agent's TTS service (the
  engine's part of token_to_audio_ms; the rest is the agent's queues, the transport and the caller);
- speech_end_to_audio_ms: the end of the caller's speech -> the same audio; of it,
  speech_end_to_transcript_ms to the recogniser's final transcript and speech_end_to_token_ms to
  the LLM's first token (the turn-taking's wait, the transcript's and the LLM's first-token delay);
- underruns / underrun_ms: once the reply plays, each stretch of at least `gap_ms` with nothing to
  play (digital silence or no audio at all) before the reply's last audible piece;
- barge_in_ms: the interruption reaching the agent -> the end of the last audible bot audio at the
  caller (the caller hears silence from then on), and barge_in_from_speech_ms from the start of the
  caller's interrupting speech.
"""

from __future__ import annotations

from dataclasses import dataclass, field

AUDIBLE_RMS = 0.003  # -50 dBFS: the page's "bot audio heard" threshold
SILENT_RMS = 1e-4  # -80 dBFS: below any voice's pauses; what an empty transport sends
GAP_MS = 60.0


@dataclass
class Heard:
    pieces: list[tuple[float, float, float]] = field(default_factory=list)  # (start_ms, end_ms, rms)

    def play(self, arrived_ms: float, dur_ms: float, rms: float, *, buffered: bool) -> float:
        """Adds a piece; `buffered`: it plays after the previous one (a jitter buffer), else on arrival."""
        start = max(arrived_ms, self.pieces[-1][1]) if buffered and self.pieces else arrived_ms
        self.pieces.append((start, start + dur_ms, rms))
        return start + dur_ms

    def clear(self, at_ms: float) -> None:
        """Drops what had not played by `at_ms` (a carrier's `clear`)."""
        kept = [(s, min(e, at_ms), r) for s, e, r in self.pieces if s < at_ms]
        self.pieces[:] = kept


@dataclass
class Turn:
    started_ms: float  # the caller began to speak
    speech_end_ms: float | None = None  # the end of its last loud 10 ms
    barge_at_ms: float | None = None  # the caller began to speak over the reply


def _audible_after(pieces, t: float, until: float) -> float | None:
    for s, _e, r in pieces:
        if t <= s < until and r > AUDIBLE_RMS:
            return s
    return None


def _last_audible_end(pieces, since: float, until: float) -> float | None:
    ends = [e for s, e, r in pieces if since <= s < until and r > AUDIBLE_RMS]
    return max(ends) if ends else None


def underruns(pieces, start: float, end: float, gap_ms: float = GAP_MS) -> list[float]:
    """The lengths of the empty stretches of >= gap_ms in [start, end): missing audio or silence."""
    gaps, empty_from, cursor = [], None, start
    for s, e, r in pieces:
        if e <= start or s >= end:
            continue
        if s > cursor and empty_from is None:
            empty_from = cursor  # nothing arrived to play between cursor and s
        if r < SILENT_RMS:
            empty_from = s if empty_from is None else empty_from
        elif empty_from is not None:
            if s - empty_from >= gap_ms:
                gaps.append(s - empty_from)
            empty_from = None
        cursor = max(cursor, e)
    return gaps


def measure_turns(heard: Heard, turns: list[Turn], events: list[dict], *, gap_ms: float = GAP_MS,
                  end_ms: float | None = None) -> list[dict]:
    """One record per turn; a missing figure is None (a turn never heard counts as such)."""
    pieces = sorted(heard.pieces)
    records = []
    for i, turn in enumerate(turns):
        until = turns[i + 1].started_ms if i + 1 < len(turns) else (end_ms or float("inf"))
        stamps = [(e["type"], e["t_ms"]) for e in events if turn.started_ms <= e["t_ms"] < until]
        tokens = [t for kind, t in stamps if kind == "llm_first_token"]
        first_token = tokens[0] if tokens else None
        interrupted = next((t for kind, t in stamps if kind == "interruption"
                            and first_token is not None and t > first_token), None)
        first_audio = None if first_token is None else _audible_after(pieces, first_token, until)
        tts = next((t for kind, t in stamps if kind == "tts_first_audio"
                    and first_token is not None and t >= first_token), None)
        record = {"token_to_audio_ms": None, "token_to_tts_ms": None, "speech_end_to_audio_ms": None,
                  "speech_end_to_transcript_ms": None, "speech_end_to_token_ms": None, "underruns": None,
                  "underrun_ms": None, "barge_in_ms": None, "barge_in_from_speech_ms": None,
                  "heard": first_audio is not None, "interrupted": interrupted is not None}
        if tts is not None:
            record["token_to_tts_ms"] = tts - first_token
        if turn.speech_end_ms is not None:
            end = turn.speech_end_ms
            final = next((t for kind, t in stamps if kind == "stt_final" and t >= end), None)
            if final is not None and (first_token is None or final <= first_token):
                record["speech_end_to_transcript_ms"] = final - end
            if first_token is not None and first_token >= end:
                record["speech_end_to_token_ms"] = first_token - end
        if first_audio is not None:
            record["token_to_audio_ms"] = first_audio - first_token
            if turn.speech_end_ms is not None:
                record["speech_end_to_audio_ms"] = first_audio - turn.speech_end_ms
            reply_until = interrupted if interrupted is not None else until
            last = _last_audible_end(pieces, first_audio, reply_until)
            gaps = underruns(pieces, first_audio, last if last is not None else first_audio, gap_ms)
            record["underruns"], record["underrun_ms"] = len(gaps), sum(gaps)
        if interrupted is not None:
            later = [t for t in tokens if t > interrupted]
            stop = _last_audible_end(pieces, first_token, later[0] if later else until)
            silent_at = max(stop or interrupted, interrupted)
            record["barge_in_ms"] = silent_at - interrupted
            if turn.barge_at_ms is not None:
                record["barge_in_from_speech_ms"] = silent_at - turn.barge_at_ms
        records.append(record)
    return records
