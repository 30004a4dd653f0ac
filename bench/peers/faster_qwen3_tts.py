"""`python -m bench.peers.faster_qwen3_tts --model DIR`: faster-qwen3-tts behind our HTTP API.

faster-qwen3-tts 0.5.4 loads the checkpoint through `qwen_tts` (the `qwen-tts-hf` build for
transformers 5, see compat.py), captures the talker's one-token decode step and the code
predictor's 15-step loop as CUDA graphs, and streams: `generate_custom_voice_streaming` yields
PCM every `chunk_size` frames (each chunk decoded with 25 frames of left context). Each chunk is
sent as it comes. It needs CUDA (`from_pretrained` refuses any other device).

Chunk size: 8 by default, the value its README's TTFA figures use (its own default is 12);
`--chunk-size` changes it.

Frames: its decode loop takes `min_new_tokens` and `max_new_tokens` and emits one frame per step,
so a random-weight request runs with both set to speech_frames(text): EOS masked, exactly that
many frames, all decoded and sent (frame 0 included).

One request at a time (server.py): one static KV cache and one pair of captured graphs serve
every call, so two generations at once would overwrite each other's state.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np

from .compat import fix_default_rope, stub_audio_io_imports
from .server import Job, arg_parser, check_sample_rate, check_voice, parse_args, serve

NAME = "faster-qwen3-tts"
DEFAULT_CHUNK = 8


class FasterQwen3TTSPeer:
    name = NAME

    def __init__(self, model_dir: str, device: str, dtype, attn: str, chunk_size: int, max_seq_len: int):
        stub_audio_io_imports()  # before faster_qwen3_tts, which imports soundfile at the top
        import qwen_tts  # noqa: F401  (registers the RoPE entry fix_default_rope replaces)
        from faster_qwen3_tts import FasterQwen3TTS

        fix_default_rope()
        self.model = FasterQwen3TTS.from_pretrained(model_dir, device=device, dtype=dtype,
                                                    attn_implementation=attn, max_seq_len=max_seq_len)
        self.chunk_size = chunk_size
        base = self.model.model  # the qwen_tts.Qwen3TTSModel it wraps
        self.speakers = set(base.get_supported_speakers() or ())
        self.languages = set(base.get_supported_languages() or ())

    def check(self, job: Job) -> None:
        check_voice(job, self.speakers, self.languages)

    def synthesize(self, job: Job) -> Iterator[np.ndarray]:
        kwargs = dict(job.sampling)
        if job.frames is not None:
            kwargs.update(max_new_tokens=job.frames, min_new_tokens=job.frames)
        elif job.max_frames is not None:
            kwargs["max_new_tokens"] = job.max_frames
        chunks = self.model.generate_custom_voice_streaming(
            text=job.text, speaker=job.voice, language=job.language, instruct=job.instruct,
            non_streaming_mode=True, chunk_size=self.chunk_size, **kwargs)
        try:
            for pcm, sample_rate, _timing in chunks:
                check_sample_rate(sample_rate)
                yield pcm
        finally:
            chunks.close()  # a client that left stops the decode loop at its next chunk


def main(argv: list[str] | None = None) -> None:
    parser = arg_parser("faster_qwen3_tts", "faster-qwen3-tts (CUDA graphs, streaming) behind POST /v1/audio/speech.",
                        port=8102)
    parser.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK,
                        help=f"frames per streamed chunk (default {DEFAULT_CHUNK}, as in its README's TTFA figures)")
    parser.add_argument("--max-seq-len", type=int, default=2048,
                        help="its static KV cache length: prompt + frames must fit (its default, 2048)")
    args = parse_args(parser, argv)
    if args.chunk_size < 1:
        parser.error("--chunk-size must be >= 1")
    if not args.device.startswith("cuda"):
        parser.error(f"faster-qwen3-tts needs a CUDA device (its from_pretrained refuses {args.device!r})")
    serve(args, NAME, lambda: FasterQwen3TTSPeer(str(args.model), args.device, args.torch_dtype, args.attn,
                                                 args.chunk_size, args.max_seq_len))


if __name__ == "__main__":
    main(sys.argv[1:])
