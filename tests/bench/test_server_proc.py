"""ServerProcess finds the server's "listening on" line after other stderr output, and reports a
server that dies before listening. The stand-in servers are tiny Python scripts (the real
`cadence serve` runs in test_smoke)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from bench.load.server_proc import ServerProcess

READY_SERVER = """
import http.server, socketserver, sys
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
srv = socketserver.TCPServer(("127.0.0.1", 0), Ready)
print("UserWarning: a library warns while loading", file=sys.stderr, flush=True)
print(f"cadence serve: listening on http://127.0.0.1:{srv.server_address[1]} (model x)", file=sys.stderr, flush=True)
srv.serve_forever()
"""


def _process(tmp_path: Path, script: str) -> ServerProcess:
    path = tmp_path / "server.py"
    path.write_text(script)
    proc = ServerProcess(Path("unused"), ready_timeout_s=30)
    proc.cmd = [sys.executable, str(path)]
    return proc


def test_listening_line_is_found_after_other_stderr_lines(tmp_path):
    with _process(tmp_path, READY_SERVER) as server:
        assert server.url.startswith("http://127.0.0.1:")
    assert server.proc.poll() is not None  # stopped on exit


def test_a_server_that_exits_before_listening_is_reported_with_its_stderr(tmp_path):
    proc = _process(tmp_path, "import sys\nprint('boom: no model here', file=sys.stderr)\nsys.exit(2)\n")
    with pytest.raises(RuntimeError, match=r"exited with status 2 before listening[\s\S]*boom"):
        proc.start()
