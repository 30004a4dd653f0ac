"""A real PulseAudio server for tests, private to one test: a null sink `speaker` (the bot's
speaker; its monitor is what the room would hear) and a null sink `micsink` whose monitor,
remapped as the source `mic`, is the microphone a test speaks into with paplay.

PortAudio (Debian's libportaudio2) reaches it through ALSA's pulse plugin (Debian's
libasound2-plugins, which the pulseaudio package pulls in): the ALSA devices `pulse` and
`default`, on the server named by PULSE_SERVER. It runs as root without `--system`
(PulseAudio warns, and works), with its runtime, state and home directories in a fresh
temporary directory, no D-Bus, and anonymous auth on its own socket.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

CONFIG = """\
load-module module-native-protocol-unix auth-anonymous=1 socket={socket}
load-module module-null-sink sink_name=speaker rate=48000 channels=1
load-module module-null-sink sink_name=micsink rate=48000 channels=1
load-module module-remap-source source_name=mic master=micsink.monitor channels=1
set-default-sink speaker
set-default-source mic
"""


def available() -> str | None:
    """Why a PulseAudio test cannot run here, or None."""
    for tool in ("pulseaudio", "pactl", "paplay", "parec", "espeak-ng"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed (apt-get install pulseaudio pulseaudio-utils espeak-ng)"
    return None


class Listener:
    """parec on one source, read as it arrives: 10 ms blocks of 16 kHz mono, each stamped with
    time.monotonic() on arrival, so that two listeners (the microphone, the speaker) share a clock
    without relying on either recording's length (a null sink's first second can run slow)."""

    RATE = 16000
    BLOCK = 160

    def __init__(self, env: dict[str, str], device: str):
        self.proc = subprocess.Popen(["parec", f"--device={device}", "--format=s16le", f"--rate={self.RATE}",
                                      "--channels=1", "--raw", "--latency-msec=10"],
                                     env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.blocks: list[tuple[float, np.ndarray]] = []
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while chunk := self.proc.stdout.read(2 * self.BLOCK):
            self.blocks.append((time.monotonic(), np.frombuffer(chunk, dtype=np.int16)))

    def audio(self, since: float = 0.0) -> np.ndarray:
        """Float samples of the blocks that arrived after `since`."""
        parts = [b for t, b in list(self.blocks) if t >= since]
        return np.concatenate(parts).astype(np.float32) / 32768 if parts else np.zeros(0, np.float32)

    def loud(self, threshold: float = 0.02) -> list[float]:
        """Arrival times of the blocks whose RMS is over `threshold` (full scale 1)."""
        return [t for t, b in list(self.blocks)
                if np.sqrt(np.mean((b.astype(np.float32) / 32768) ** 2)) > threshold]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self._thread.join(timeout=5)


class PulseServer:
    def __init__(self):
        self.dir = Path(tempfile.mkdtemp(prefix="pa", dir="/tmp"))  # a unix socket path is short
        self.socket = self.dir / "native"
        self.env = {**os.environ, "PULSE_SERVER": f"unix:{self.socket}", "HOME": str(self.dir),
                    "XDG_RUNTIME_DIR": str(self.dir), "PULSE_RUNTIME_PATH": str(self.dir / "rt"),
                    "PULSE_STATE_PATH": str(self.dir / "st")}
        (self.dir / "default.pa").write_text(CONFIG.format(socket=self.socket))
        self.log = open(self.dir / "pulseaudio.log", "w")  # noqa: SIM115 (closed in stop)
        self.proc = subprocess.Popen(
            ["pulseaudio", "-n", "-F", str(self.dir / "default.pa"), "--daemonize=no", "--exit-idle-time=-1",
             "--disallow-exit", "--use-pid-file=no", "--log-target=stderr"],
            env=self.env, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while self.pactl("info", check=False).returncode != 0:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"pulseaudio did not start: {(self.dir / 'pulseaudio.log').read_text()[-2000:]}")
            time.sleep(0.1)

    def pactl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run(["pactl", *args], env=self.env, capture_output=True, text=True, check=check, timeout=10)

    def play(self, wav: Path) -> subprocess.Popen:
        """Speak `wav` into the microphone (returns at once; the process exits once it has played)."""
        return subprocess.Popen(["paplay", "--device=micsink", str(wav)], env=self.env)

    def listen(self, device: str) -> Listener:
        """Record `device` (a source, e.g. `speaker.monitor`) as it arrives, timestamped."""
        return Listener(self.env, device)

    def add_echo_path(self, gain: float = 0.5) -> None:
        """The room: what the speaker plays reaches the microphone (a loopback, `gain` of it)."""
        self.pactl("load-module", "module-loopback", "source=speaker.monitor", "sink=micsink", "latency_msec=60",
                   "source_dont_move=true", "sink_dont_move=true")
        self.pactl("set-source-volume", "speaker.monitor", f"{gain}")  # a linear factor

    def remove_devices(self) -> None:
        """Unplug: unload every sink and source module (the streams on them are killed)."""
        for line in self.pactl("list", "modules", "short").stdout.splitlines():
            index, name = line.split()[:2]
            if name in ("module-remap-source", "module-null-sink"):
                self.pactl("unload-module", index, check=False)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        with contextlib.suppress(OSError):
            shutil.rmtree(self.dir)
