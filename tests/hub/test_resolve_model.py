"""`--model` by repo id: resolved from a Hugging Face cache laid out as huggingface_hub lays it out."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import pytest
import torch

from tests.hub.cache_layout import add_snapshot
from tts_engine.hub import resolve_model
from tts_engine.loading import load_checkpoint

REPO = "Qwen/Qwen3-TTS-12Hz-0.6B-CustomVoice"
COMMIT = "0123456789abcdef0123456789abcdef01234567"
OLD_COMMIT = "fedcba9876543210fedcba9876543210fedcba98"


@pytest.fixture(scope="module")
def hf_cache(tmp_path_factory, tiny_checkpoint):
    cache = tmp_path_factory.mktemp("hf-cache")
    add_snapshot(cache, REPO, tiny_checkpoint, COMMIT)
    add_snapshot(cache, REPO, tiny_checkpoint, OLD_COMMIT, refs=("v0.1",))
    return cache


def _cli(args: list[str], cache, **env) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "HF_HUB_CACHE": str(cache), "HF_HUB_DISABLE_TELEMETRY": "1", **env}
    return subprocess.run([sys.executable, "-m", "tts_engine.hub", "download", *args], env=full_env,
                          capture_output=True, text=True, timeout=60)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_offline_repo_id_resolves_to_the_cached_snapshot_and_loads(hf_cache, tiny_checkpoint):
    path = resolve_model(REPO, offline=True, cache_dir=hf_cache)
    assert path == hf_cache / f"models--Qwen--Qwen3-TTS-12Hz-0.6B-CustomVoice/snapshots/{COMMIT}"
    ours, source = load_checkpoint(path), load_checkpoint(tiny_checkpoint)
    assert ours.cfg == source.cfg
    for (name, a), (_, b) in zip(ours.model.state_dict().items(), source.model.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    assert (path / "speech_tokenizer" / "model.safetensors").is_file()


def test_hf_hub_offline_env_resolves_by_repo_id(hf_cache):
    done = _cli([REPO], hf_cache, HF_HUB_OFFLINE="1")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith(f"snapshots/{COMMIT}")


@pytest.mark.parametrize(("revision", "commit"), [("v0.1", OLD_COMMIT), (OLD_COMMIT, OLD_COMMIT), ("main", COMMIT)])
def test_revision_by_tag_or_commit(hf_cache, revision, commit):
    assert resolve_model(REPO, revision, offline=True, cache_dir=hf_cache).name == commit


def test_missing_repo_is_a_one_line_error(hf_cache):
    with pytest.raises(ValueError, match="not in the Hugging Face cache and offline mode is on") as err:
        resolve_model("Qwen/No-Such-Model", offline=True, cache_dir=hf_cache)
    assert "\n" not in str(err.value)


def test_missing_revision_is_a_one_line_error(hf_cache):
    with pytest.raises(ValueError, match=r"CustomVoice@v9 is not in the Hugging Face cache") as err:
        resolve_model(REPO, "v9", offline=True, cache_dir=hf_cache)
    assert "\n" not in str(err.value)


def test_cli_exits_2_with_one_line_for_a_missing_repo(hf_cache):
    done = _cli(["Qwen/No-Such-Model"], hf_cache, HF_HUB_OFFLINE="1")
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0
    assert "Qwen/No-Such-Model is not in the Hugging Face cache" in done.stderr


def test_unreachable_hub_falls_back_to_the_cache_or_says_so(hf_cache):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    env = {"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": endpoint, "HF_HUB_ETAG_TIMEOUT": "2",
           "HF_HUB_DOWNLOAD_TIMEOUT": "2"}
    cached = _cli([REPO], hf_cache, **env)
    assert cached.returncode == 0, cached.stderr
    assert cached.stdout.strip().endswith(f"snapshots/{COMMIT}")
    missing = _cli(["Qwen/No-Such-Model"], hf_cache, **env)
    assert missing.returncode == 2
    assert missing.stderr.strip().splitlines()[-1] == (
        "error: Qwen/No-Such-Model is not in the Hugging Face cache and the Hub cannot be reached")


def test_snapshot_without_the_speech_tokenizer_is_refused(tmp_path, tiny_checkpoint):
    src = tmp_path / "src"
    shutil.copytree(tiny_checkpoint, src, ignore=shutil.ignore_patterns("speech_tokenizer"))
    add_snapshot(tmp_path / "cache", "org/talker-only", src, COMMIT)
    with pytest.raises(ValueError, match=r"speech_tokenizer/config\.json is missing"):
        resolve_model("org/talker-only", offline=True, cache_dir=tmp_path / "cache")


def test_directories_pass_through_and_bad_names_are_refused(tiny_checkpoint, tmp_path):
    assert resolve_model(tiny_checkpoint) == tiny_checkpoint
    with pytest.raises(ValueError, match="--revision applies to a Hugging Face repo id"):
        resolve_model(tiny_checkpoint, "main")
    for path in (str(tmp_path / "missing-dir"), "a/b/c", "../x", "./x"):  # paths: a missing directory
        with pytest.raises(ValueError, match=r"model directory .* does not exist"):
            resolve_model(path, offline=True, cache_dir=tmp_path)
    for bad in ("not a repo", "org/name with spaces"):
        with pytest.raises(ValueError, match="neither a directory nor a Hugging Face repo id"):
            resolve_model(bad, offline=True, cache_dir=tmp_path)
