"""Devices by name or index on a real PulseAudio server, and the clear message when there is none.
`cadence talk` runs as a real process (`python -m transports.talk`)."""

from __future__ import annotations

import re

from .conftest import without_sound


def test_list_devices_shows_the_sound_servers_devices(pulse_server, talk_process):
    talk = talk_process(pulse_server.env, "--list-devices")
    assert talk.finish(60) == 0, talk.text
    rows = [line for _, line in talk.lines if re.match(r"^[ <>]{2} +\d+ +in", line)]
    names = {row.split("Hz")[-1].strip() for row in rows}
    assert {"pulse", "default"} <= names, talk.text
    assert any(row.startswith("<>") and row.endswith("default") for row in rows), talk.text


def test_no_audio_device_is_one_clear_line_and_status_2(tmp_path, talk_process):
    talk = talk_process(without_sound(tmp_path))
    assert talk.finish(60) == 2, talk.text
    assert talk.lines[-1][1] == ("cadence talk: no audio input device: the system has no default input "
                                 "(microphone); see --list-devices"), talk.text
    assert "Traceback" not in talk.text


def test_an_unknown_device_name_or_index_is_refused(pulse_server, talk_process):
    for args, message in ((("--input", "no such mic"), "no audio input device named 'no such mic'"),
                          (("--output", "99"), "no audio device with index 99")):
        talk = talk_process(pulse_server.env, *args)
        assert talk.finish(60) == 2, talk.text
        assert talk.lines[-1][1].startswith(f"cadence talk: {message}"), talk.text
