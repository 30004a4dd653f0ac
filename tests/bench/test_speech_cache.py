"""bench/voice/turns.py's recordings: made once by espeak-ng, then read from the cache, also where
espeak-ng is missing (a GPU machine); a text never recorded there is a clear error."""

from __future__ import annotations

import pytest

from bench.voice import turns


def test_a_recording_is_cached_and_read_back_without_espeak(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    first = turns.speak("Who wrote the old letter?", 16000)
    assert len(list((tmp_path / "cadence" / "speech").glob("*.wav"))) == 1
    assert turns.speech_end_s(first, 16000) > 0.5
    monkeypatch.setattr(turns.shutil, "which", lambda _name: None)  # as on a machine without espeak-ng
    assert (turns.speak("Who wrote the old letter?", 16000) == first).all()
    with pytest.raises(FileNotFoundError, match="espeak-ng is not installed"):
        turns.speak("A sentence never recorded here.", 16000)
