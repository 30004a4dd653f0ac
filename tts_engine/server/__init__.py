"""The streaming server: `POST /v1/audio/speech` (OpenAI-compatible) and the `/v1/stream`
WebSocket, over one engine. See docs/streaming-api.md."""

from .app import create_app
from .config import ServerConfig

__all__ = ["ServerConfig", "create_app"]
