"""Models by name: a local checkpoint directory or a Hugging Face repo id, resolved to a directory.

A repo id (`Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice`) is downloaded once into the standard Hugging
Face cache (`HF_HUB_CACHE`, default `~/.cache/huggingface/hub`) through `huggingface_hub`, which
shows a progress bar per file, resumes interrupted downloads and honours `HF_HUB_OFFLINE=1`. The
official repos ship the speech tokenizer (codec) in their `speech_tokenizer/` folder; it is fetched
with the talker, and a snapshot without it is an error rather than a half-loaded model.

`resolve_model` raises ValueError with a one-line message for every user error (no such repo or
revision, no network and nothing cached, a directory that is not a checkpoint).
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

# Files a Qwen3-TTS checkpoint needs; README, images and .gitattributes are not downloaded.
CHECKPOINT_FILES = ("*.json", "*.txt", "*.safetensors", "speech_tokenizer/*")
_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def is_repo_id(name: str) -> bool:
    return bool(_REPO_ID.match(name)) and ".." not in name


def resolve_model(name_or_dir: str | Path, revision: str | None = None, *,
                  offline: bool | None = None, cache_dir: str | Path | None = None) -> Path:
    """-> a local checkpoint directory. A directory is returned as is; a repo id is downloaded (or
    found in the cache). `offline`: None follows HF_HUB_OFFLINE; True never touches the network."""
    path = Path(name_or_dir).expanduser()
    if path.is_dir():
        if revision is not None:
            raise ValueError(f"--revision applies to a Hugging Face repo id, not to the directory {path}")
        return path
    name = str(name_or_dir)
    if name.startswith(("/", ".", "~")) or name.count("/") > 1:  # a path, not org/name
        raise ValueError(f"model directory {path} does not exist")
    if not is_repo_id(name):
        raise ValueError(f"model {name!r} is neither a directory nor a Hugging Face repo id like "
                         "Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice")
    snapshot = _download(name, revision, offline, cache_dir)
    _check_snapshot(snapshot, name)
    return snapshot


def _download(repo_id: str, revision: str | None, offline: bool | None,
              cache_dir: str | Path | None) -> Path:
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    local_only = constants.HF_HUB_OFFLINE if offline is None else offline
    at = f"{repo_id}@{revision}" if revision else repo_id
    try:
        return Path(snapshot_download(repo_id, revision=revision, allow_patterns=list(CHECKPOINT_FILES),
                                      cache_dir=cache_dir, local_files_only=local_only))
    except RevisionNotFoundError:
        raise ValueError(f"{repo_id} has no revision {revision!r}") from None
    except GatedRepoError:
        raise ValueError(f"{repo_id} is gated: accept its terms on huggingface.co and log in "
                         "(`hf auth login`)") from None
    except RepositoryNotFoundError:
        raise ValueError(f"no model {repo_id!r} on the Hugging Face Hub (or it is private)") from None
    except LocalEntryNotFoundError:
        why = "offline mode is on (HF_HUB_OFFLINE=1)" if local_only else "the Hub cannot be reached"
        raise ValueError(f"{at} is not in the Hugging Face cache and {why}") from None
    except (HfHubHTTPError, OSError) as e:
        first_line = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ValueError(f"downloading {at} failed: {first_line}") from None


def _check_snapshot(snapshot: Path, repo_id: str) -> None:
    for required in ("config.json", "speech_tokenizer/config.json"):
        if not (snapshot / required).is_file():
            raise ValueError(f"{repo_id} is not a Qwen3-TTS checkpoint: {required} is missing")


def register(subparsers) -> None:
    p = subparsers.add_parser("download", help="download a model into the Hugging Face cache "
                              "and print its directory")
    p.add_argument("model", help="Hugging Face repo id, e.g. Qwen/Qwen3-TTS-12Hz-1.7B-CustomVoice")
    p.add_argument("--revision", default=None, help="branch, tag or commit (default: main)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    print(resolve_model(args.model, args.revision))
    return 0


if __name__ == "__main__":
    parser = argparse.ArgumentParser(prog="python -m tts_engine.hub")
    register(parser.add_subparsers(required=True))
    ns = parser.parse_args()
    try:
        raise SystemExit(ns.func(ns))
    except ValueError as err:
        parser.exit(2, f"error: {err}\n")
