"""Leading-silence trimming: the onset detector finds where sound starts, keeps at most a 10 ms
guard before it, never cuts into it, and gives the same answer however the audio is chunked."""

from __future__ import annotations

import numpy as np
import pytest

from tts_engine.engine.audio import GUARD, HOP, WINDOW, OnsetTrimmer, find_onset, to_s16le

SR = 24000
FRAME = 1920  # what the engine pushes: whole codec frames
THRESHOLD = -45.0


def tone_after_silence(start: int, total: int, rms_dbfs: float, hz: float, dc: float = 0.0) -> np.ndarray:
    """Silence (a constant `dc`) until sample `start`, then a sine of the given RMS level."""
    pcm = np.full(total, dc, dtype=np.float32)
    t = np.arange(total - start)
    amplitude = np.sqrt(2) * 10 ** (rms_dbfs / 20)
    pcm[start:] += (amplitude * np.sin(2 * np.pi * hz * t / SR)).astype(np.float32)
    return pcm


def push_all(trimmer: OnsetTrimmer, pcm: np.ndarray, sizes: list[int]) -> np.ndarray:
    out, i, k = [], 0, 0
    while i < len(pcm):
        n = sizes[k % len(sizes)]
        out.append(trimmer.push(pcm[i:i + n]))
        i, k = i + n, k + 1
    return np.concatenate(out)


TONES = [
    # (tone start, RMS dBFS, Hz, DC offset): loud and just-above-threshold, low and high pitch,
    # starts on and off the 10 ms hop grid, a constant offset in the "silence".
    (9600, -6.0, 440.0, 0.0),
    (9600 + 37, -6.0, 150.0, 0.0),
    (12345, -20.0, 3000.0, 0.0),
    (5000 + 239, THRESHOLD + 2.0, 440.0, 0.0),
    (7777, THRESHOLD + 2.0, 150.0, 0.0),
    (8000 + 1, -12.0, 200.0, 0.05),
]


@pytest.mark.parametrize(("start", "level", "hz", "dc"), TONES)
def test_onset_of_a_tone_is_within_10ms_before_it_and_never_after(start, level, hz, dc):
    pcm = tone_after_silence(start, start + SR // 2, level, hz, dc)
    onset = find_onset(pcm, THRESHOLD)
    assert onset is not None, "tone not detected"
    assert start - GUARD <= onset <= start, f"onset {onset} for a tone starting at {start}"
    # Chunk by chunk, as the engine pushes frames: the same cut, nothing after it lost.
    trimmer = OnsetTrimmer(THRESHOLD)
    out = push_all(trimmer, pcm, [FRAME])
    assert trimmer.trimmed_samples == onset
    np.testing.assert_array_equal(out, pcm[onset:])


def test_quiet_onset_split_across_chunk_boundaries_is_found():
    boundary = 3 * FRAME
    for start in (boundary - 100, boundary - WINDOW, boundary - 1, boundary + 5):
        pcm = tone_after_silence(start, 8 * FRAME, THRESHOLD + 1.5, 300.0)
        whole = find_onset(pcm, THRESHOLD)
        assert whole is not None and start - GUARD <= whole <= start
        trimmer = OnsetTrimmer(THRESHOLD)
        outputs = [trimmer.push(pcm[i:i + FRAME]) for i in range(0, len(pcm), FRAME)]
        assert not any(len(o) for o in outputs[:2]), "audio sent before the tone"
        assert trimmer.started
        assert trimmer.trimmed_samples == whole
        np.testing.assert_array_equal(np.concatenate(outputs), pcm[whole:])
    # Chunks that are not whole frames still cut within the guard before the onset.
    start = boundary - 100
    pcm = tone_after_silence(start, 8 * FRAME, THRESHOLD + 1.5, 300.0)
    trimmer = OnsetTrimmer(THRESHOLD)
    out = push_all(trimmer, pcm, [1000, 333, 2500, 7])
    assert start - GUARD <= trimmer.trimmed_samples <= start
    np.testing.assert_array_equal(out, pcm[trimmer.trimmed_samples:])


@pytest.mark.parametrize(("noise_dbfs", "dc"), [(THRESHOLD - 5.0, 0.0), (THRESHOLD - 3.0, 0.0), (-60.0, 0.2)])
def test_noise_below_threshold_never_triggers(noise_dbfs, dc):
    rng = np.random.default_rng(0)
    pcm = (dc + rng.standard_normal(5 * SR) * 10 ** (noise_dbfs / 20)).astype(np.float32)
    assert find_onset(pcm, THRESHOLD) is None
    trimmer = OnsetTrimmer(THRESHOLD)
    out = push_all(trimmer, pcm, [FRAME])
    assert len(out) == 0 and not trimmer.started
    # It holds back only the one window + hop it needs to see an onset split across chunks.
    assert len(trimmer.held) == WINDOW + HOP
    assert trimmer.trimmed_samples == len(pcm) - (WINDOW + HOP)


def test_threshold_none_passes_everything():
    rng = np.random.default_rng(1)
    trimmer = OnsetTrimmer(None)
    chunks = [np.zeros(FRAME, dtype=np.float32), (rng.standard_normal(FRAME) * 1e-4).astype(np.float32),
              tone_after_silence(100, 2 * FRAME, -6.0, 440.0)]
    for chunk in chunks:
        np.testing.assert_array_equal(trimmer.push(chunk), chunk)
    assert trimmer.trimmed_samples == 0


def test_s16le_rounds_and_clips():
    pcm = np.array([0.0, 1.0, -1.0, 1.5, -2.0, 1.4 / 32767, -2.6 / 32767], dtype=np.float32)
    assert np.frombuffer(to_s16le(pcm), dtype="<i2").tolist() == [0, 32767, -32767, 32767, -32767, 1, -3]


def test_a_stream_sends_the_int16_samples_it_is_given_from_its_onset_on():
    """A codec call makes int16 samples for all its streams (`CodecRunner.decode(s16=True)`); a stream sends
    its row unchanged from its onset on, and finds that onset as the float trimmer does in s16 / 32767."""
    from tts_engine.engine.audio import HOP, WINDOW, OnsetTrimmer, to_s16
    from tts_engine.engine.streamout import StreamOutput

    rng = np.random.default_rng(0)
    batch = np.zeros((3, 3 * 1920), dtype=np.float32)
    batch[0] = rng.uniform(-1.2, 1.2, batch.shape[1])  # loud (and clipping) from the start
    batch[1, 2000:] = 0.3 * np.sin(np.arange(batch.shape[1] - 2000) / 5)  # silence, then a tone
    s16 = to_s16(batch)  # row 2 stays silent
    for row in range(3):
        out, trimmer, sent = StreamOutput("a", -45.0), OnsetTrimmer(-45.0), b""
        for first in (1, 2, 3):  # three one-frame chunks of the row
            part = s16[row, (first - 1) * 1920:first * 1920]
            event = out.audio(part, first, 1, final=first == 3)
            sent += event.pcm if event is not None else b""
            trimmer.push(part.astype(np.float32) / 32767)
        kept = len(sent) // 2
        assert sent == s16[row, s16.shape[1] - kept:].tobytes()
        onset = s16.shape[1] - kept
        held = 0 if kept else WINDOW + HOP  # a silent stream holds its last window back
        assert out.trimmer.trimmed_samples == trimmer.trimmed_samples == onset - held
        assert (onset == 0, 2000 - 240 <= onset <= 2000, kept == 0)[row]  # the tone's onset less the 10 ms guard


def test_word_timings_only_where_enabled(tiny_checkpoint):
    """A stream without word timings (the non-streaming layout) keeps no words: its tokens are not
    decoded on the engine thread; one with them sends each word once its next word has begun."""
    from tts_engine.engine.audio import to_s16
    from tts_engine.engine.streamout import StreamOutput
    from tts_engine.text import TextTokenizer

    tok = TextTokenizer.from_dir(tiny_checkpoint)
    ids = tok.encode(" Hello there friend")
    outs = {enabled: StreamOutput("s", None) for enabled in (True, False)}
    pcm = np.full(1920 * len(ids), 0.1, dtype=np.float32)
    for enabled, out in outs.items():
        out.timings_enabled = enabled
        out.add_tokens(ids, tok)
    assert outs[False].words == [] and outs[False].tokens == 0
    assert [w for _, w in outs[True].words] and outs[True].tokens == len(ids)
    events = {enabled: out.audio(to_s16(pcm), 1, len(ids), final=True) for enabled, out in outs.items()}
    assert events[False].words == ()
    assert " ".join(w.word for w in events[True].words) == tok.decode(ids).strip()
