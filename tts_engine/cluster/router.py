"""Serve's request router for the engine replicas: a new stream goes to the replica with the most
headroom by the engine's admission model (headroom.py), not round robin or shortest queue.

Each replica publishes its headroom every `STATS_PERIOD_S` (Serve's `record_routing_stats`); between
two readings this router takes the streams it has sent a replica since off that replica's `free`, so a
burst spreads instead of piling onto one stale "best". A WebSocket connection is one Serve request for
its whole life, so its contexts stay on the replica chosen at the handshake. When no replica admits,
the request still goes to the best one, whose own admission answers 503 + Retry-After (or the
`overloaded` event) exactly as a single server does. Serve removes dead replicas from the candidates.
"""

from __future__ import annotations

from ray.serve.request_router import FIFOMixin, PendingRequest, ReplicaID, RequestRouter, RunningReplica

from .headroom import rank_key

STATS_PERIOD_S = 0.2
# Requests that open engine streams: the others (health, metrics, voices) do not use headroom.
STREAM_ROUTES = ("/v1/audio/speech", "/v1/stream")


def opens_streams(route: str) -> bool:
    return not route or route.startswith(STREAM_ROUTES)


class HeadroomRouter(FIFOMixin, RequestRouter):
    def initialize_state(self, **kwargs) -> None:
        self._routed: dict[ReplicaID, tuple[float, int]] = {}  # replica -> (reading's time, streams sent since)

    def _sent_since(self, replica: RunningReplica) -> int:
        at = float(replica.routing_stats.get("at", 0.0))
        seen_at, sent = self._routed.get(replica.replica_id, (at, 0))
        return sent if seen_at == at else 0

    async def choose_replicas(self, candidate_replicas: list[RunningReplica],
                              pending_request: PendingRequest | None = None) -> list[list[RunningReplica]]:
        ranked = sorted(candidate_replicas, key=lambda r: rank_key(r.routing_stats, self._sent_since(r)))
        return [[r] for r in ranked]

    def on_request_routed(self, pending_request: PendingRequest, replica_id: ReplicaID, result) -> None:
        if pending_request is None or not opens_streams(pending_request.metadata.route):
            return
        replica = self._replicas.get(replica_id)
        if replica is None:
            return
        at = float(replica.routing_stats.get("at", 0.0))
        seen_at, sent = self._routed.get(replica_id, (at, 0))
        self._routed[replica_id] = (at, sent + 1 if seen_at == at else 1)
