"""The streaming server: `POST /v1/audio/speech` (OpenAI-compatible) and the `/v1/stream`
WebSocket, over one engine. See docs/streaming-api.md.

`create_app` is imported when first asked for: the clients (the agent, the phone) use this package's
torch-free modules (config, security, protocol, run) and must not load the engine with them."""

from .config import ServerConfig

__all__ = ["ServerConfig", "create_app"]


def __getattr__(name: str):
    if name == "create_app":
        from .app import create_app

        return create_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
