"""Per-client caps: engine streams and WebSocket connections held at once by one client.

A client is its API key (or the key behind its browser token) where keys are configured, else its
address (security.py puts the identity into the request's scope). Without these caps one client could
take every engine slot (say 9 connections x 16 contexts), and everyone else got 503; with them it gets
429 `client_quota` past its share, and the rest of the engine stays for others.
"""

from __future__ import annotations

from collections import Counter

from .errors import ApiError
from .security import IDENTITY


class ClientQuota:
    def __init__(self, what: str, limit: int, on_reject=None):
        self.what = what  # "streams", "WebSocket connections": for the error message
        self.limit = limit
        self.held: Counter[str] = Counter()
        self.on_reject = on_reject

    def acquire(self, client: str) -> None:
        """Count one more for `client`, or raise ApiError(client_quota)."""
        if self.held[client] >= self.limit:
            if self.on_reject is not None:
                self.on_reject("client_quota")
            raise ApiError("client_quota", f"this client holds {self.held[client]} {self.what}; the limit per "
                           f"client is {self.limit}", retry_after_s=1.0)
        self.held[client] += 1

    def release(self, client: str) -> None:
        self.held[client] -= 1
        if self.held[client] <= 0:
            del self.held[client]


def client_of(scope) -> str:
    """The identity AccessGuard set, else the peer address (an app built without the guard)."""
    if (identity := scope.get(IDENTITY)) is not None:
        return identity
    client = scope.get("client")
    return f"addr:{client[0] if client else 'unknown'}"
