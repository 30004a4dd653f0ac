"""Cloned voices by id: each prompt is computed once and kept (in memory, and in a directory when one
is given, so voices survive a restart). Thread-safe: the HTTP handlers add and delete voices while
the speech endpoints look them up.
"""

from __future__ import annotations

import json
import re
import secrets
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from ..prompt import VoiceSpec
from .clone import ClonePrompt

ID_PREFIX = "voice_"
_ID = re.compile(r"^voice_[0-9a-f]{16}$")


@dataclass(frozen=True)
class StoredVoice:
    voice_id: str
    name: str | None
    created_at: float  # Unix time
    seconds: float  # length of the reference audio
    prompt: ClonePrompt

    def describe(self) -> dict:
        return {"id": self.voice_id, "object": "voice", "name": self.name, "created_at": int(self.created_at),
                "mode": "in_context" if self.prompt.in_context else "speaker_embedding",
                "reference_seconds": round(self.seconds, 2), "reference_text": self.prompt.ref_text}


def is_voice_id(name: str | None) -> bool:
    return name is not None and bool(_ID.match(name))


class VoiceStore:
    def __init__(self, directory: str | Path | None = None, *, max_voices: int = 1000):
        self.directory = Path(directory) if directory is not None else None
        self.max_voices = max_voices
        self._voices: dict[str, StoredVoice] = {}
        self._lock = threading.Lock()
        if self.directory is not None:
            self.directory.mkdir(parents=True, exist_ok=True)
            for file in sorted(self.directory.glob(f"{ID_PREFIX}*.safetensors")):
                voice = _load(file)
                self._voices[voice.voice_id] = voice

    def add(self, prompt: ClonePrompt, *, name: str | None = None, seconds: float) -> StoredVoice:
        with self._lock:
            if len(self._voices) >= self.max_voices:
                raise OverflowError(f"the server keeps at most {self.max_voices} voices: delete one first")
            voice = StoredVoice(ID_PREFIX + secrets.token_hex(8), name, time.time(), seconds, prompt)
            if self.directory is not None:
                _save(voice, self.directory / f"{voice.voice_id}.safetensors")
            self._voices[voice.voice_id] = voice
            return voice

    def get(self, voice_id: str) -> StoredVoice | None:
        with self._lock:
            return self._voices.get(voice_id)

    def list(self) -> list[StoredVoice]:
        with self._lock:
            return sorted(self._voices.values(), key=lambda v: v.created_at)

    def delete(self, voice_id: str) -> bool:
        with self._lock:
            voice = self._voices.pop(voice_id, None)
            if voice is not None and self.directory is not None:
                (self.directory / f"{voice_id}.safetensors").unlink(missing_ok=True)
            return voice is not None

    def attach(self, voice: VoiceSpec) -> VoiceSpec:
        """A voice naming a stored id gets its prompt; any other voice is returned unchanged. An id
        that looks like a voice id but is unknown stays unattached (the model then refuses it)."""
        if voice.cloned is not None or not is_voice_id(voice.speaker):
            return voice
        stored = self.get(voice.speaker)
        return voice if stored is None else replace(voice, cloned=stored.prompt)


def _save(voice: StoredVoice, path: Path) -> None:
    p = voice.prompt
    tensors = {"speaker_embedding": p.speaker_embedding.contiguous()}
    if p.ref_codes is not None:
        tensors["ref_codes"] = p.ref_codes.contiguous()
        tensors["ref_text_ids"] = torch.tensor(p.ref_text_ids, dtype=torch.long)
    meta = {"voice_id": voice.voice_id, "name": voice.name, "created_at": voice.created_at,
            "seconds": voice.seconds, "ref_text": p.ref_text}
    tmp = path.with_suffix(".tmp")
    save_file(tensors, str(tmp), metadata={"voice": json.dumps(meta)})
    tmp.replace(path)


def _load(path: Path) -> StoredVoice:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = json.loads(f.metadata()["voice"])
    t = load_file(str(path))
    ids = tuple(int(i) for i in t["ref_text_ids"].tolist()) if "ref_text_ids" in t else ()
    prompt = ClonePrompt(t["speaker_embedding"], t.get("ref_codes"), ids, meta.get("ref_text"))
    return StoredVoice(meta["voice_id"], meta.get("name"), float(meta["created_at"]), float(meta["seconds"]), prompt)
