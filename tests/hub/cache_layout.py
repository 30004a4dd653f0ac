"""A Hugging Face cache built from a local checkpoint, laid out exactly as huggingface_hub lays it out.

  CACHE/models--{org}--{name}/blobs/{etag}                   file contents, one per distinct file
  CACHE/models--{org}--{name}/snapshots/{commit}/{path}      relative symlinks into ../blobs
  CACHE/models--{org}--{name}/refs/{ref}                     the commit hash, no newline

Etags are what the Hub serves: sha256 for LFS files (the safetensors), the git blob sha1 otherwise.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def _etag(data: bytes, lfs: bool) -> str:
    if lfs:
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def add_snapshot(cache: Path, repo_id: str, src: Path, commit: str, refs: tuple[str, ...] = ("main",)) -> Path:
    """Copy checkpoint `src` into `cache` as snapshot `commit` of `repo_id`; -> the snapshot dir."""
    repo = cache / ("models--" + repo_id.replace("/", "--"))
    snapshot = repo / "snapshots" / commit
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    for file in sorted(p for p in src.rglob("*") if p.is_file()):
        rel = file.relative_to(src)
        data = file.read_bytes()
        blob = repo / "blobs" / _etag(data, file.suffix == ".safetensors")
        blob.write_bytes(data)
        link = snapshot / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    (repo / "refs").mkdir(exist_ok=True)
    for ref in refs:
        ref_file = repo / "refs" / ref
        ref_file.parent.mkdir(parents=True, exist_ok=True)
        ref_file.write_text(commit)
    return snapshot
