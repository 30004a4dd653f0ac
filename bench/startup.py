"""Start-up and cloning on a GPU: `python -m bench.startup --custom-model DIR --base-model DIR [--out FILE]`.

  start        `cadence serve` (CustomVoice) to `/ready` with empty kernel caches (CADENCE_CUDA_CACHE and
               TRITON_CACHE_DIR point into a fresh temporary directory, or `--keep-caches DIR`, emptied), then
               again with the caches it filled; then the Base model with those caches. Per start: seconds to
               listening and to ready, and each phase's seconds as its log lines give them
               (runtime/progress.py), nvcc builds counted.
  clone        `POST /v1/voices` with references of 3, 10 and 20 s (espeak-ng speech, else a synthetic voiced
               signal), in-context (with the transcript) and speaker-embedding only; `--clone-reps` each, p50.
               The first upload loads the encoders: timed apart.
  first_audio  request sent -> first PCM byte over a raw socket (bench/socket_latency.py's measurement), a
               cloned voice on the Base server (both modes) vs a built-in speaker on the CustomVoice server,
               `--requests` sequential requests each.
Writes one JSON (stdout too).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from bench.load.server_proc import ServerProcess
from bench.socket_latency import corpus, socket_requests
from bench.startup_refs import reference_wav, source

PHASE_DONE = re.compile(r"start-up: (.+?) done in ([\d.]+) s")
LOADED = re.compile(r"loaded (.+?): ([\d.]+) MB read in ([\d.]+) s")
CLONE_SECONDS = (3.0, 10.0, 20.0)


class TimedServer(ServerProcess):
    """`cadence serve` at log level info, its stderr lines kept with their seconds since the spawn."""

    def __init__(self, model: Path, device: str, env: dict[str, str]):
        self.lines: list[tuple[float, str]] = []
        super().__init__(model, device=device, extra_args=("--log-level", "info"), env=env,
                         on_line=lambda line: self.lines.append((time.monotonic() - self.spawned, line.rstrip())))

    def start(self) -> TimedServer:
        self.spawned = time.monotonic()
        super().start()
        self.ready_s = time.monotonic() - self.spawned
        return self

    def report(self) -> dict:
        phases, loaded, listening = {}, {}, None
        for at, line in self.lines:
            if (m := PHASE_DONE.search(line)) is not None:
                phases[m.group(1)] = float(m.group(2))
            elif (m := LOADED.search(line)) is not None:
                loaded[m.group(1)] = {"mb": float(m.group(2)), "s": float(m.group(3))}
            elif listening is None and "listening on" in line:
                listening = at
        return {"ready_s": round(self.ready_s, 2), "listening_s": listening and round(listening, 2),
                "phases_s": phases, "loaded": loaded,
                "nvcc_builds": sum("nvcc built" in line for _, line in self.lines)}

    @property
    def port(self) -> int:
        return urlsplit(self.url).port


def _start(model: Path, device: str, env: dict[str, str]) -> TimedServer:
    return TimedServer(model, device, env).start()


def clone_times(server: TimedServer, seconds: tuple[float, ...], reps: int, workdir: Path) -> dict:
    """Wall seconds of `POST /v1/voices` per reference length and mode (each voice deleted after)."""
    out: dict = {}
    with httpx.Client(base_url=server.url, timeout=300) as client:
        def clone(path: Path, text: str | None) -> tuple[float, str]:
            data = {"text": text} if text else {}
            t0 = time.perf_counter()
            r = client.post("/v1/voices", files={"audio": (path.name, path.read_bytes(), "audio/wav")}, data=data)
            took = time.perf_counter() - t0
            if r.status_code != 201:
                raise RuntimeError(f"POST /v1/voices refused {path.name}: {r.status_code} {r.text[:300]}")
            return took, r.json()["id"]

        first_path, first_text = reference_wav(seconds[0], workdir)
        took, vid = clone(first_path, first_text)
        client.delete(f"/v1/voices/{vid}")
        out["first_clone_s"] = round(took, 3)  # loads the speaker and codec encoders
        for length in seconds:
            path, text = reference_wav(length, workdir)
            row = {}
            for mode, transcript in (("in_context", text), ("speaker_embedding", None)):
                runs = []
                for _ in range(reps):
                    took, vid = clone(path, transcript)
                    client.delete(f"/v1/voices/{vid}").raise_for_status()
                    runs.append(round(took * 1e3, 2))
                row[mode] = {"p50_ms": statistics.median(runs), "runs_ms": runs}
            out[f"{length:g}s"] = row
    return out


def cloned_voice(server: TimedServer, seconds: float, in_context: bool, workdir: Path) -> str:
    path, text = reference_wav(seconds, workdir)
    r = httpx.post(server.url + "/v1/voices", files={"audio": (path.name, path.read_bytes(), "audio/wav")},
                   data={"text": text} if in_context else {}, timeout=300)
    r.raise_for_status()
    return r.json()["id"]


def run(args) -> dict:
    result: dict = {"device": args.device, "custom_model": str(args.custom_model), "base_model": str(args.base_model),
                    "clone_reps": args.clone_reps, "requests": args.requests}
    texts = corpus()
    with tempfile.TemporaryDirectory(prefix="cadence-startup-") as tmp:
        work = Path(tmp)
        if args.keep_caches is not None:
            # The first start must still be cold: whatever an earlier run left there goes first.
            shutil.rmtree(args.keep_caches, ignore_errors=True)
            work = args.keep_caches
            work.mkdir(parents=True)
        env = {**os.environ, "CADENCE_CUDA_CACHE": str(work / "cuda"), "TRITON_CACHE_DIR": str(work / "triton")}
        starts = result["start"] = {}
        server = _start(args.custom_model, args.device, env)
        server.stop()
        starts["custom_cold"] = server.report()
        server = _start(args.custom_model, args.device, env)
        try:
            starts["custom_warm"] = server.report()
            first = result["first_audio"] = {
                "builtin_speaker": socket_requests(server.port, args.requests, texts, voice=args.speaker,
                                                   warmup=args.warmup)}
        finally:
            server.stop()
        server = _start(args.base_model, args.device, env)
        try:
            starts["base_warm"] = server.report()
            result["clone"] = clone_times(server, tuple(args.clone_seconds), args.clone_reps, work)
            for mode, in_context in (("cloned_in_context", True), ("cloned_speaker_embedding", False)):
                voice = cloned_voice(server, args.first_audio_ref_s, in_context, work)
                first[mode] = socket_requests(server.port, args.requests, texts, voice=voice, warmup=args.warmup)
        finally:
            server.stop()
        result["reference_source"] = source()
    return result


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n")[0])
    p.add_argument("--custom-model", type=Path, required=True, help="a CustomVoice checkpoint directory")
    p.add_argument("--base-model", type=Path, required=True, help="a Base checkpoint directory (cloning)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--clone-reps", type=int, default=5)
    p.add_argument("--clone-seconds", type=float, nargs="+", default=list(CLONE_SECONDS))
    p.add_argument("--requests", type=int, default=30, help="measured first-audio requests per voice")
    p.add_argument("--warmup", type=int, default=5, help="unmeasured requests before them")
    p.add_argument("--speaker", default="ryan", help="the CustomVoice model's built-in speaker")
    p.add_argument("--first-audio-ref-s", type=float, default=10.0, help="reference length of the cloned voice")
    p.add_argument("--keep-caches", type=Path, default=None, metavar="DIR",
                   help="fill the kernel caches in DIR (emptied first) and leave them there, so that a server started "
                        "later with CADENCE_CUDA_CACHE=DIR/cuda TRITON_CACHE_DIR=DIR/triton starts warm")
    p.add_argument("--out", type=Path, default=None)
    args = p.parse_args(argv)
    for model in (args.custom_model, args.base_model):
        if not (model / "config.json").is_file():
            p.error(f"{model} is not a checkpoint directory (no config.json)")
    result = run(args)
    text = json.dumps(result, indent=2)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
