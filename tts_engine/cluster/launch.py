"""Start the cluster: Serve's proxy on [server] host:port, the metrics board at /metrics, and
`replicas` engine replicas (one GPU each on CUDA) routed by headroom."""

from __future__ import annotations

import os

from ray import serve
from ray.serve.config import RequestRouterConfig

from .proxy import ENV, IMPORT_PATH
from .replica import METRICS_APP, QUIET, ClusterMetrics, EngineReplica
from .router import STATS_PERIOD_S, HeadroomRouter

APP = "cadence"
# Serve's own cap on requests in one replica: far above what admission lets in, so that the engine,
# not Serve, refuses (with the single server's 503 + Retry-After).
MAX_ONGOING = 4096


def deploy(model: str, device: str, replicas: int, settings, *, cpus_per_replica: float = 1.0,
           address: str | None = None) -> None:
    """Deploy onto the running Ray cluster (ray.init() first); returns once every replica is up."""
    cfg = settings.server
    serve.start(http_options={"host": cfg.host, "port": cfg.port, "keep_alive_timeout_s": cfg.keep_alive_s})
    serve.run(ClusterMetrics.bind(), name=METRICS_APP, route_prefix="/metrics")
    gpus = 1 if device.startswith("cuda") else 0
    # Under Ray each replica sees only its own GPU (CUDA_VISIBLE_DEVICES), as cuda:0.
    engine_device = "cuda" if gpus else device
    deployment = serve.deployment(EngineReplica).options(
        name="EngineReplica", num_replicas=replicas, max_ongoing_requests=MAX_ONGOING, logging_config=QUIET,
        ray_actor_options={"num_gpus": gpus, "num_cpus": cpus_per_replica},
        health_check_period_s=1.0, health_check_timeout_s=10.0,
        request_router_config=RequestRouterConfig(request_router_class=HeadroomRouter,
                                                  request_routing_stats_period_s=STATS_PERIOD_S,
                                                  request_routing_stats_timeout_s=1.0))
    serve.run(deployment.bind(model, engine_device, settings), name=APP, route_prefix="/")


def proxy_env() -> None:
    """Serve's proxy reads its middleware from the environment that Ray starts it in: call before ray.init
    (on other machines, export it before `ray start`; docs/scale-out.md)."""
    os.environ.setdefault(ENV, IMPORT_PATH)


def shutdown() -> None:
    serve.shutdown()
