"""A real registrar for the tests: Debian's Kamailio, in the foreground on a loopback port.

It challenges every REGISTER with digest auth (user `bot`, the password given), keeps bindings in
memory, and routes an INVITE for a registered user to its contact (record-routed, so in-dialog
requests pass through it as through a company's PBX); an INVITE for anyone else gets 404.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from tests.transports.telephony.helpers import free_port

MODULES = "/usr/lib/x86_64-linux-gnu/kamailio/modules/"
CONFIG = """#!KAMAILIO
debug=2
log_stderror=yes
fork=no
children=1
listen=udp:127.0.0.1:{port}
auto_aliases=no
mpath="{modules}"
loadmodule "tm.so"
loadmodule "sl.so"
loadmodule "rr.so"
loadmodule "pv.so"
loadmodule "maxfwd.so"
loadmodule "siputils.so"
loadmodule "textops.so"
loadmodule "usrloc.so"
loadmodule "registrar.so"
loadmodule "auth.so"
modparam("registrar", "min_expires", 5)
request_route {{
    if (!mf_process_maxfwd_header("10")) {{ sl_send_reply("483", "Too Many Hops"); exit; }}
    if (is_method("REGISTER")) {{
        if (!pv_www_authenticate("$td", "{password}", "0")) {{ www_challenge("$td", "1"); exit; }}
        if ($au != "bot") {{ sl_send_reply("403", "Forbidden"); exit; }}
        save("location");
        exit;
    }}
    if (has_totag()) {{
        if (loose_route() || is_method("ACK")) {{ t_relay(); exit; }}
        sl_send_reply("404", "Not Here");
        exit;
    }}
    if (is_method("INVITE")) record_route();
    if (!lookup("location")) {{ sl_send_reply("404", "Not Found"); exit; }}
    t_relay();
}}
"""


class Kamailio:
    def __init__(self, workdir: Path, password: str):
        if shutil.which("kamailio") is None:
            pytest.fail("the registrar tests need kamailio (apt-get install -y --no-install-recommends kamailio)")
        self.dir = workdir
        self.port = free_port(socket.SOCK_DGRAM)
        (workdir / "kamailio.cfg").write_text(CONFIG.format(port=self.port, modules=MODULES, password=password))
        self.log = workdir / "kamailio.log"
        self.proc: subprocess.Popen | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> Kamailio:
        self.proc = subprocess.Popen(
            # Line-buffered: "Listening on" (stdout) says the socket is bound.
            ["stdbuf", "-oL", "kamailio", "-f", str(self.dir / "kamailio.cfg"), "-E", "-Y", str(self.dir),
             "-P", str(self.dir / "pid")],
            stdout=self.log.open("w"), stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while "Listening on" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"kamailio did not start: {self.log.read_text(errors='replace')[-2000:]}")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
