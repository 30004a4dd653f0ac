"""One request's client-side metrics from what its target observed (serving.md)."""

from __future__ import annotations

from .corpus import Prompt
from .playout import play_time_of_sample, simulate
from .records import Exchange, RequestRecord


def measure(ex: Exchange, *, index: int, measured: bool, prompt: Prompt, scheduled_at_s: float,
            trial_t0: float, done_at: float) -> RequestRecord:
    sr = ex.sample_rate
    play = simulate(ex.chunks, sr)
    onset = ex.onset_sample
    ttfa = play_time_of_sample(play, ex.chunks, onset, sr) if onset is not None else None
    audio_s = play.samples / sr
    ok = ex.error is None and ex.end_s is not None
    return RequestRecord(
        index=index, measured=measured, sample_rate=sr, chars=len(prompt.text), sentences=prompt.sentences,
        scheduled_at_s=scheduled_at_s, sent_at_s=None if ex.t0 is None else ex.t0 - trial_t0,
        done_at_s=done_at - trial_t0, ok=ok, status=ex.status, error=ex.error, ttfb_s=ex.ttfb_s,
        first_playable_s=play.start_s, onset_sample=onset, audible_ttfa_s=ttfa, e2e_s=ex.end_s,
        audio_s=audio_s, rtf=ex.end_s / audio_s if ok and audio_s > 0 else None,
        underruns=play.underruns, stall_total_s=play.stall_total_s, stall_max_s=play.stall_max_s,
        stalls=[(s.at_s, s.length_s) for s in play.stalls], chunks=[(c.at_s, c.samples) for c in ex.chunks])
