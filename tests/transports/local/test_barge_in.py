"""Barge-in on a real call: with `--headphones` the user's voice interrupts the bot and gets its
own answer (and Ctrl-C then ends the call with status 0); with `--aec` in a room where the
microphone hears the speaker (a PulseAudio loopback from the speaker to the microphone), the bot
does not interrupt itself but the user still can. (The default gate's side, words over the answer
changing nothing, is in test_talk.py.)"""

from __future__ import annotations

import signal
import time

import pytest

from .test_talk import ANSWER_S, START_S, transcribe, words

pytestmark = pytest.mark.slow


def call(pulse_server, talk_process, question_wav, barge_in_wav, *args, before_barge_in=None):
    """Ask, let the answer start, speak over it; (talk, speaker, when the barge-in ended)."""
    speaker = pulse_server.listen("speaker.monitor")
    talk = talk_process(pulse_server.env, *args)
    talk.wait_for("speak now", START_S)
    time.sleep(1.5)
    assert pulse_server.play(question_wav).wait(timeout=30) == 0
    talk.wait_for("from the end of your speech to the bot's first sound", ANSWER_S)
    time.sleep(2.5 if before_barge_in else 1.0)  # the bot is speaking
    if before_barge_in:
        before_barge_in(talk, speaker)
    talk.barge_in_at = time.monotonic()
    assert pulse_server.play(barge_in_wav).wait(timeout=30) == 0
    return talk, speaker, time.monotonic()


def test_with_headphones_the_user_interrupts_the_bot(pulse_server, talk_process, question_wav, barge_in_wav):
    talk, speaker, spoken = call(pulse_server, talk_process, question_wav, barge_in_wav, "--headphones")
    try:
        talk.wait_for("turn 2:", ANSWER_S)
        time.sleep(4)
        users = words(" ".join(line.removeprefix("you: ") for t, line in talk.lines
                               if line.startswith("you: ") and t > talk.barge_in_at))
        assert {"stop", "please", "another", "question", "train"} & set(users.split()), talk.text[-3000:]
        heard = words(transcribe(speaker.audio(since=spoken)))
        assert "you said" in heard and ("please" in heard or "question" in heard), heard
        assert "hear the voice start" not in heard, heard  # the first answer's later words were cut

        talk.proc.send_signal(signal.SIGINT)  # Ctrl-C ends the call cleanly
        assert talk.finish(15) == 0, talk.text[-3000:]
        assert "cadence talk: stopped" in talk.text and "Traceback" not in talk.text, talk.text[-3000:]
    finally:
        speaker.stop()


def test_with_aec_the_bot_does_not_hear_itself_but_the_user_interrupts(pulse_server, talk_process, question_wav,
                                                                       barge_in_wav):
    pulse_server.add_echo_path(gain=0.2)  # the speaker further from the microphone than the user
    mic = pulse_server.listen("mic")

    def hears_only_its_echo(talk, speaker):
        speaking = talk.wait_for("speaking...", 1)
        echo = [t for t in mic.loud(threshold=0.01) if t > speaking]
        bot = [t for t in speaker.loud(threshold=0.01) if t > speaking]
        assert len(echo) > 0.5 * len(bot) > 20, f"the microphone hears {len(echo)} loud blocks of the bot's {len(bot)}"
        assert sum("you: " in line for _, line in talk.lines) == 1, talk.text[-3000:]  # the question only

    talk, speaker, spoken = call(pulse_server, talk_process, question_wav, barge_in_wav, "--aec",
                                 before_barge_in=hears_only_its_echo)
    try:
        talk.wait_for("turn 2:", ANSWER_S)
        time.sleep(3)
        # What was heard after the user began to speak over the bot. Whisper tiny.en garbles words
        # said over the bot's cancelled echo ("I have another question" was heard as "I can't wait
        # to ask you"), so the check is that speech was heard then, not which words.
        users = [line for t, line in talk.lines if line.startswith("you: ") and t > talk.barge_in_at]
        assert users and len(words(" ".join(u.removeprefix("you: ") for u in users)).split()) >= 4, users
        heard = words(transcribe(speaker.audio(since=spoken)))
        assert "you said" in heard and "hear the voice start" not in heard, heard  # a new answer, the old one cut
    finally:
        speaker.stop()
        mic.stop()
