"""A local Ray cluster with two tiny-checkpoint engine replicas behind Serve's proxy and the headroom
router, shared by the module's tests (starting it takes ~30 s on two cores)."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass

import httpx
import pytest

ray = pytest.importorskip("ray", reason="the `cluster` extra (ray[serve]) is not installed")

# Two streams a replica (no queue): a test fills one replica with two open contexts.
CAP = 2


@dataclass
class Cluster:
    url: str
    ws_url: str

    def replicas(self) -> dict[str, dict]:
        """Replica name -> its metrics the board last received (active streams, ready)."""
        from prometheus_client.parser import text_string_to_metric_families

        out: dict[str, dict] = {}
        for fam in text_string_to_metric_families(httpx.get(self.url + "/metrics", timeout=10).text):
            for s in fam.samples:
                if "replica" in s.labels and s.name.startswith("cadence_engine_"):
                    out.setdefault(s.labels["replica"], {})[s.name.removeprefix("cadence_engine_")] = s.value
        return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(check, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


@pytest.fixture(scope="module")
def cluster(tiny_checkpoint):
    from ray import serve

    from tts_engine import settings as settings_file
    from tts_engine.cluster.launch import deploy, proxy_env

    port = free_port()
    settings = settings_file.load(None, {"server": {"port": port},
                                         "scheduler": {"max_active_streams": CAP, "max_queued_streams": 0}})
    proxy_env()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        deploy(str(tiny_checkpoint), "cpu", 2, settings, cpus_per_replica=0.5)
        c = Cluster(f"http://127.0.0.1:{port}", f"ws://127.0.0.1:{port}/v1/stream")
        wait_for(lambda: len([r for r in c.replicas().values() if r.get("ready") == 1.0]) == 2, 120,
                 "both replicas ready")
        yield c
    finally:
        serve.shutdown()
        ray.shutdown()
