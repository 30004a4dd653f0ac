"""A real SIP phone for the tests: Debian's baresip, dialling the bot over loopback.

It plays a WAV file as its microphone (`aufile`), records what it sends and what it hears
(`sndfile`: dump-*-enc.wav and dump-*-dec.wav), and takes key presses on a UDP console (`cons`):
a digit pressed during a call goes out as an RFC 4733 telephone-event.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
import wave
from pathlib import Path

import numpy as np
import pytest

from tests.transports.telephony.helpers import free_port

MODULES = "/usr/lib/baresip/modules"


def caller_wav(path: Path, speech: bytes, *, lead_s: float, tail_s: float, rate: int = 8000) -> None:
    """The caller's microphone: silence, the question, then silence for the rest of the call (a
    phone keeps sending audio; the bot's VAD needs the silence to end the turn)."""
    silence = lambda s: bytes(2 * int(s * rate))  # noqa: E731
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(silence(lead_s) + speech + silence(tail_s))


def read_wav(path: Path) -> tuple[bytes, int]:
    with wave.open(str(path)) as w:
        return w.readframes(w.getnframes()), w.getframerate()


def onsets(pcm: bytes, rate: int, threshold: float = 0.02) -> tuple[float | None, float | None]:
    """(first, last) time (s) the audio is louder than `threshold`, or None."""
    samples = np.abs(np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768)
    loud = np.flatnonzero(samples > threshold)
    return (loud[0] / rate, loud[-1] / rate) if loud.size else (None, None)


class Baresip:
    def __init__(self, workdir: Path, microphone: Path, *, codecs: str = "PCMU"):
        if shutil.which("baresip") is None:
            pytest.fail("the SIP tests need baresip (apt-get install -y --no-install-recommends baresip)")
        self.dir = workdir
        self.records = workdir / "rec"
        self.records.mkdir(parents=True, exist_ok=True)
        self.cons_port = free_port(socket.SOCK_DGRAM)
        sip_port = free_port(socket.SOCK_DGRAM)
        (workdir / "config").write_text("\n".join([
            "poll_method epoll", f"sip_listen 127.0.0.1:{sip_port}",
            f"audio_source aufile,{microphone}", "audio_player aubridge,nowhere",
            f"module_path {MODULES}", "module g711.so", "module g722.so", "module aufile.so",
            "module aubridge.so", "module sndfile.so", "module cons.so", "module_app account.so",
            "module_app menu.so", f"cons_listen 127.0.0.1:{self.cons_port}", f"snd_path {self.records}",
            "rtp_ports 40000-49999",
            # A deep jitter buffer (20 ms frames): on a loaded CI machine the bot's packets can come in bursts.
            "jitter_buffer_delay 10-50", ""]))
        (workdir / "accounts").write_text(f"<sip:caller@127.0.0.1>;regint=0;audio_codecs={codecs}\n")
        self.proc: subprocess.Popen | None = None
        self.log = workdir / "baresip.log"

    def dial(self, uri: str, *, seconds: float) -> None:
        """Call `uri`; baresip hangs up (BYE) and quits after `seconds`."""
        self.proc = subprocess.Popen(
            ["baresip", "-n", "127.0.0.1", "-f", str(self.dir), "-e", f"/dial {uri}", "-t", str(int(seconds))],
            stdout=self.log.open("w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)

    def press(self, keys: str, hold_s: float = 0.2, gap_s: float = 0.2) -> None:
        """Press and release keys on the phone's keypad. The console takes characters as typed;
        0x04 is baresip's key-release code, which ends the digit's telephone-event."""
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for key in keys:
                s.sendto(key.encode(), ("127.0.0.1", self.cons_port))
                time.sleep(hold_s)
                s.sendto(b"\x04", ("127.0.0.1", self.cons_port))
                time.sleep(gap_s)

    def wait(self, timeout: float) -> str:
        assert self.proc is not None
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.log.read_text(errors="replace").replace("\r", "\n")

    def recording(self, which: str) -> tuple[bytes, int]:
        """"dec": what the caller heard; "enc": what the caller sent."""
        (path,) = self.records.glob(f"dump-*-{which}.wav")
        return read_wav(path)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
