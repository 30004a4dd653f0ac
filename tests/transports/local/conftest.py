from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from . import pulse

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def pulse_server():
    """A private PulseAudio server with a null-sink speaker and a microphone fed by paplay."""
    missing = pulse.available()
    if missing is not None:
        pytest.fail(f"the local transport's tests need a real audio server: {missing}")
    server = pulse.PulseServer()
    yield server
    server.stop()


def espeak(path: Path, text: str) -> Path:
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(path), text], check=True)
    return path


@pytest.fixture
def question_wav(tmp_path) -> Path:
    return espeak(tmp_path / "question.wav", "What is the weather like today?")


@pytest.fixture
def barge_in_wav(tmp_path) -> Path:
    return espeak(tmp_path / "barge_in.wav", "Stop please, I have another question about the train.")


class TalkProcess:
    """`python -m transports.talk ARGS` as a real process; its output (stdout and stderr) is read
    line by line as it comes, each line stamped with time.monotonic()."""

    def __init__(self, env: dict[str, str], *args: str):
        self.proc = subprocess.Popen([sys.executable, "-m", "transports.talk", *args], cwd=ROOT,
                                     env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    @property
    def text(self) -> str:
        return "\n".join(line for _, line in self.lines)

    def wait_for(self, needle: str, timeout_s: float) -> float:
        """The arrival time of the first line containing `needle`; fails after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for t, line in list(self.lines):
                if needle in line:
                    return t
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        self._thread.join(timeout=2)
        shown = "\n".join(line for _, line in self.lines if "| DEBUG" not in line and "ALSA lib" not in line)
        pytest.fail(f"no {needle!r} from cadence talk (exit status {self.proc.poll()}):\n{shown[-4000:]}")

    def finish(self, timeout_s: float) -> int:
        """Wait for the process to exit and its output to be read; its exit status."""
        status = self.proc.wait(timeout=timeout_s)
        self._thread.join(timeout=5)
        return status

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._thread.join(timeout=5)


@pytest.fixture
def talk_process():
    started: list[TalkProcess] = []

    def start(env: dict[str, str], *args: str) -> TalkProcess:
        started.append(TalkProcess(env, *args))
        return started[-1]

    yield start
    for p in started:
        p.stop()


def without_sound(tmp_path: Path) -> dict[str, str]:
    """An environment in which PortAudio finds no device: no sound server answers (PULSE_SERVER names
    a socket nobody listens on) and the machine has no sound card."""
    cards = Path("/proc/asound/cards")
    if cards.exists() and "no soundcards" not in cards.read_text():
        pytest.skip("this machine has a sound card: the no-device message cannot be shown here")
    return {**os.environ, "PULSE_SERVER": f"unix:{tmp_path / 'nobody'}"}
