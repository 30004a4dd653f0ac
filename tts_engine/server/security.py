"""Who may use a server: API keys, short-lived browser tokens, and the Origin and Host allow-lists.

`AccessGuard` is pure ASGI middleware, so the same checks wrap `cadence serve` (app.py) and the agent's
page server (agent/server.py). In order, for every HTTP request and WebSocket handshake:
  1. Host     the `Host` header's name must be allowed (a DNS-rebinding page reaches a loopback server
              under its own name, never under `localhost`).
  2. Origin   a browser's `Origin`, when sent, must be the server's own or listed; `null` never is.
              Non-browser clients send none and pass.
  3. key      with keys configured, `Authorization: Bearer <key or token>` (a browser, which cannot set
              headers on a WebSocket, puts a token in `?access_token=`); open paths (/health, /ready)
              need none.
A refused WebSocket handshake is closed before it is accepted: the client sees HTTP 403.

`POST <token_path>` with a key (never a token) answers `{"token", "expires_in"}`: a token signed with a
per-process secret (itsdangerous), valid `token_ttl_s`, carrying the key's id so per-key quotas hold for it.
The request's client identity (`key:<id>` or `addr:<ip>`) goes into the scope for the quotas (quota.py).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from urllib.parse import parse_qs

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer
from starlette.types import ASGIApp, Receive, Scope, Send

from .config import ServerConfig
from .errors import ApiError

API_KEYS_ENV = "CADENCE_API_KEYS"
IDENTITY = "cadence.identity"  # scope key: the client's identity for per-client quotas
LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
TOKEN_QUERY = "access_token"


def read_api_keys(path: str | Path | None = None, environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Keys from a file (one a line, `#` comments and blank lines skipped) and from CADENCE_API_KEYS
    (comma-separated), in that order, without duplicates."""
    keys: list[str] = []
    if path is not None:
        try:
            lines = Path(path).read_text(encoding="utf-8").splitlines()
        except FileNotFoundError:
            raise FileNotFoundError(f"API keys file {path} does not exist") from None
        keys += [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if environ is not None:
        keys += [k.strip() for k in environ.get(API_KEYS_ENV, "").split(",") if k.strip()]
    return tuple(dict.fromkeys(keys))


def with_api_keys(cfg: ServerConfig, environ: Mapping[str, str]) -> ServerConfig:
    """The config with the keys of its api_keys_file and of the environment added, validated, and checked
    that it does not listen beyond loopback without keys. The CLI calls this once, before loading the model."""
    keys = (*cfg.api_keys, *read_api_keys(cfg.api_keys_file, environ))
    return replace(cfg, api_keys=tuple(dict.fromkeys(keys))).validate().check_exposure()


def key_id(key: str) -> str:
    """A key's public name in tokens, logs and quotas: not the key, not enough to find it."""
    return hashlib.sha256(key.encode()).hexdigest()[:12]


@dataclass(frozen=True)
class AccessPolicy:
    api_keys: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()  # empty or "*": any
    open_paths: tuple[str, ...] = ("/health", "/ready")  # exact paths, or prefixes ending in "/" ("/" alone: exact)
    token_path: str | None = "/v1/tokens"
    token_ttl_s: float = 300.0
    secret: bytes = field(default_factory=lambda: secrets.token_bytes(32), repr=False)

    @classmethod
    def from_server_config(cls, cfg: ServerConfig) -> AccessPolicy:
        hosts = cfg.allowed_hosts or (LOOPBACK_HOSTS if cfg.loopback_only else ())
        open_paths = ("/health", "/ready", *(("/metrics",) if cfg.metrics_public else ()))
        return cls(api_keys=tuple(cfg.api_keys), allowed_origins=tuple(cfg.allowed_origins),
                   allowed_hosts=tuple(hosts), open_paths=open_paths, token_ttl_s=cfg.browser_token_ttl_s)

    @classmethod
    def for_page_server(cls, cfg: ServerConfig) -> AccessPolicy:
        """The agent's page server (agent/server.py): the page and its files are public (they hold no
        secret), its API (`/api/...`) needs a key or a token from `POST /api/token`."""
        policy = cls.from_server_config(cfg)
        return replace(policy, open_paths=("/", "/static/", "/health", "/ready"), token_path="/api/token")

    @property
    def needs_key(self) -> bool:
        return bool(self.api_keys)


class Credentials:
    """Checks keys in constant time against their digests, and makes and checks browser tokens."""

    def __init__(self, policy: AccessPolicy):
        self._digests = {hashlib.sha256(k.encode()).digest(): key_id(k) for k in policy.api_keys}
        self._tokens = URLSafeTimedSerializer(policy.secret, salt="cadence-browser-token")
        self.ttl_s = policy.token_ttl_s

    def key(self, presented: str) -> str | None:
        """The key id of a valid key, else None."""
        digest = hashlib.sha256(presented.encode("utf-8", "surrogatepass")).digest()
        found = None
        for known, kid in self._digests.items():  # every digest compared: no early exit to time
            if hmac.compare_digest(known, digest):
                found = kid
        return found

    def token(self, kid: str) -> str:
        return self._tokens.dumps({"k": kid})

    def token_key(self, token: str) -> str | None:
        """The key id a valid, unexpired token was made for, else None."""
        try:
            data = self._tokens.loads(token, max_age=self.ttl_s)
        except (BadSignature, SignatureExpired, ValueError, UnicodeError):
            return None
        kid = data.get("k") if isinstance(data, dict) else None
        return kid if isinstance(kid, str) and kid in self._digests.values() else None


class AccessGuard:
    """ASGI middleware applying an AccessPolicy (see the module docstring). on_reject(code) counts refusals."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy, on_reject: Callable[[str], None] | None = None):
        self.app = app
        self.policy = policy
        self.credentials = Credentials(policy)
        self.on_reject = on_reject
        self._hosts = frozenset(h.lower().strip("[]") for h in policy.allowed_hosts)
        self._origins = frozenset(o.lower() for o in policy.allowed_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        try:
            self._check_host(headers.get("host"))
            self._check_origin(scope, headers)
            if scope["type"] == "http" and scope["path"] == self.policy.token_path:
                await self._issue_token(scope, headers, send)
                return
            kid = self._authenticate(scope, headers)
        except ApiError as err:
            if self.on_reject is not None:
                self.on_reject(err.code)
            await _refuse(scope, send, err)
            return
        client = scope.get("client")
        scope[IDENTITY] = f"key:{kid}" if kid else f"addr:{client[0] if client else 'unknown'}"
        await self.app(scope, receive, send)

    def _check_host(self, host: str | None) -> None:
        if not self._hosts or "*" in self._hosts:
            return
        name = _host_name(host or "")
        if name not in self._hosts:
            raise ApiError("host_not_allowed", f"Host {name or '(none)'!r} is not served here")

    def _check_origin(self, scope: Scope, headers: Mapping[str, str]) -> None:
        origin = headers.get("origin")
        if origin is None:
            return  # not a browser
        origin = origin.lower()
        secure = scope.get("scheme") in ("https", "wss")
        own = f"{'https' if secure else 'http'}://{headers.get('host', '').lower()}"
        if origin == "null" or not (origin == own or origin in self._origins):
            raise ApiError("origin_not_allowed", f"Origin {origin!r} is not allowed")

    def _open_path(self, path: str) -> bool:
        return any(path == p or (len(p) > 1 and p.endswith("/") and path.startswith(p)) for p in self.policy.open_paths)

    def _authenticate(self, scope: Scope, headers: Mapping[str, str]) -> str | None:
        """The key id the request acts for (None: no keys configured, or an open path without one)."""
        if not self.policy.needs_key:
            return None
        bearer = _bearer(headers.get("authorization"))
        if bearer is not None:
            kid = self.credentials.key(bearer) or self.credentials.token_key(bearer)
        else:
            query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
            token = query.get(TOKEN_QUERY, [None])[-1]
            kid = self.credentials.token_key(token) if token else None  # a key never travels in a URL
        if kid is None and not self._open_path(scope["path"]):
            raise ApiError("unauthorized", "a valid API key is needed: Authorization: Bearer <key>")
        return kid

    async def _issue_token(self, scope: Scope, headers: Mapping[str, str], send: Send) -> None:
        if scope["method"] != "POST":
            raise ApiError("method_not_allowed", f"{self.policy.token_path} takes POST")
        bearer = _bearer(headers.get("authorization"))
        kid = self.credentials.key(bearer) if bearer is not None else None
        if kid is None:  # only a key makes tokens: a token cannot renew itself
            raise ApiError("unauthorized", "a browser token needs an API key: Authorization: Bearer <key>")
        body = {"token": self.credentials.token(kid), "token_type": "bearer",
                "expires_in": self.policy.token_ttl_s, "query_param": TOKEN_QUERY}
        await _send_json(send, 200, body, [(b"cache-control", b"no-store")])


def _headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}


def _host_name(host: str) -> str:
    host = host.strip().lower()
    if host.startswith("["):  # [::1]:8000
        return host[1:host.find("]")] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def _bearer(value: str | None) -> str | None:
    if value is None:
        return None
    scheme, _, credential = value.strip().partition(" ")
    return credential.strip() if scheme.lower() == "bearer" and credential.strip() else None


async def _refuse(scope: Scope, send: Send, err: ApiError) -> None:
    if scope["type"] == "websocket":  # closed before accept: the server answers the handshake 403
        await send({"type": "websocket.close", "code": 1008, "reason": err.message[:120]})
        return
    extra = [(b"www-authenticate", b'Bearer realm="cadence"')] if err.code == "unauthorized" else []
    await _send_json(send, err.http_status, err.http_body(), extra)


async def _send_json(send: Send, status: int, body: dict, extra: Iterable[tuple[bytes, bytes]] = ()) -> None:
    data = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode()), *extra]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": data, "more_body": False})
