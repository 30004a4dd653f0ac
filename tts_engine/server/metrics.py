"""Prometheus metrics: what the server counts itself, plus the engine's `metrics()` dict.

Each app has its own registry (tests build several apps in one process). Engine values are read
at scrape time and exported as gauges named `cadence_engine_<key>`.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Callable, Iterator

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# Time to first audio, seconds: from the request (or `open` message) to its first audio chunk
# handed to the socket.
TTFA_BUCKETS = (0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _EngineCollector(Collector):
    def __init__(self, read: Callable[[], dict[str, float]]):
        self._read = read

    def collect(self) -> Iterator[GaugeMetricFamily]:
        try:
            values = self._read()
        except Exception:  # a failed engine must not break /metrics
            log.exception("engine.metrics() failed")
            return
        for key, value in sorted(values.items()):
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                continue
            name = "cadence_engine_" + re.sub(r"[^a-zA-Z0-9_]", "_", key)
            yield GaugeMetricFamily(name, f"engine metric {key!r}", value=float(value))


class ServerMetrics:
    def __init__(self, engine_metrics: Callable[[], dict[str, float]]):
        disable_created_metrics()  # the `_created` series only double the output
        self.registry = CollectorRegistry()
        r = self.registry
        self.http_responses = Counter("cadence_http_responses", "HTTP responses by endpoint and status",
                                      ["endpoint", "status"], registry=r)
        self.rejections = Counter("cadence_rejections", "requests and contexts refused, by error code",
                                  ["code"], registry=r)
        self.ttfa = Histogram("cadence_time_to_first_audio_seconds",
                              "request (or WebSocket open) to first audio sent", ["endpoint"],
                              buckets=TTFA_BUCKETS, registry=r)
        self.streams_open = Gauge("cadence_server_streams_open", "engine streams the server holds open",
                                  ["endpoint"], registry=r)
        self.http_write_stalls = Counter("cadence_http_write_stalls", "HTTP connections aborted because their "
                                         "client did not drain a response for http_write_stall_s", registry=r)
        self.ws_connections = Gauge("cadence_ws_connections", "open WebSocket connections", registry=r)
        self.ws_closes = Counter("cadence_ws_closes", "WebSocket connections closed, by close code: the server's "
                                 "where it closed, else the client's as the ASGI server reports it (1005: none "
                                 "received, as when the keepalive ping times out)", ["code"], registry=r)
        r.register(_EngineCollector(engine_metrics))

    def render(self) -> bytes:
        return generate_latest(self.registry)
