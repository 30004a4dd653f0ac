"""A reference WAV as the agent's voice: uploaded once to the Cadence engine's `POST /v1/voices` (a Base
model clones it), and the returned id spoken with wherever a voice name goes.

Uploads are kept per process, by engine, file (path, size, modification time) and transcript: every call
of a running agent speaks with the one voice its first call made, and an edited file is uploaded again.
"""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import aiohttp

UPLOAD_TIMEOUT_S = 120.0  # the engine encodes the reference on the first upload after loading its encoders
_uploaded: dict[tuple, str] = {}


class VoiceUploadError(RuntimeError):
    """The reference audio did not become a voice: missing file, engine refused it, or unreachable."""


class EngineUnreachable(VoiceUploadError):
    """No answer from the engine (refused connection, timeout)."""


def voices_url(stream_url: str) -> str:
    """ws://host:port/v1/stream -> http://host:port/v1/voices (wss -> https)."""
    parts = urlsplit(stream_url)
    scheme = {"ws": "http", "wss": "https"}.get(parts.scheme, parts.scheme)
    return urlunsplit((scheme, parts.netloc, "/v1/voices", "", ""))


def check_reference(path: str | Path) -> Path:
    """The reference file, or VoiceUploadError naming it when it is not a readable file."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise VoiceUploadError(f"voice_ref_audio {path} does not exist (or is not a file)")
    return path


async def upload_reference_voice(stream_url: str, path: str | Path, text: str | None = None, *,
                                 timeout_s: float = UPLOAD_TIMEOUT_S) -> str:
    """The voice id of `path` (a WAV of the speaker, 1-30 s; `text`: its transcript, for in-context cloning)
    on the engine behind `stream_url`, uploaded on first use. VoiceUploadError says why it failed."""
    path = check_reference(path)
    url = voices_url(stream_url)
    stat = path.stat()
    key = (url, str(path.resolve()), stat.st_size, stat.st_mtime_ns, text or None)
    if key in _uploaded:  # two calls that start at once may both upload: two ids for one voice, both valid
        return _uploaded[key]
    form = aiohttp.FormData()
    form.add_field("audio", path.read_bytes(), filename=path.name, content_type="audio/wav")
    if text and text.strip():
        form.add_field("text", text)
    form.add_field("name", path.stem[:64])
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session, \
                session.post(url, data=form) as response:
            status, body = response.status, await response.text()
    except (TimeoutError, aiohttp.ClientError, OSError) as e:
        raise EngineUnreachable(f"cannot upload {path} as the voice: the Cadence server at {url} is "
                               f"unreachable ({type(e).__name__}: {e})") from e
    if status != 201:
        raise VoiceUploadError(f"the Cadence server refused {path} as a voice ({status}): {_message(body)}")
    voice_id = json.loads(body)["id"]
    _uploaded[key] = voice_id
    return voice_id

def _message(body: str) -> str:
    """The engine's error message ({"error": {"message": ...}}), else the start of the body."""
    try:
        return json.loads(body)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return body[:300] or "no details"
