"""`python -m bench.peers.qwen_tts --model DIR`: the official qwen-tts package behind our HTTP API.

The package has no streaming output: `Qwen3TTSModel.generate_custom_voice` returns the whole
waveform, so the response body is that PCM, sent once it is all there (time to first audio is the
time to the whole utterance, as for any user of the package). Requests run one at a time
(server.py): the package batches only lists given in one call, and a batch waits for its longest
member, so it offers a server nothing better than one call per request.

Frames: the talker's code predictor fills a frame's other 15 codebooks on the step after its
codebook-0 token is sampled, so `max_new_tokens = n + 1` gives n frames (as tests/test_parity.py
uses it). On a random-weight checkpoint every request gets n = speech_frames(text) and EOS is
masked for all of them (min_new_tokens = max_new_tokens, see `_exact_length`), as our engine does.
All n frames are decoded and sent, frame 0 included: n * 1920 samples.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator

import numpy as np

from .compat import fix_default_rope, stub_audio_io_imports
from .server import Job, arg_parser, check_sample_rate, check_voice, parse_args, serve

NAME = "qwen-tts"


class OfficialQwenTTS:
    name = NAME

    def __init__(self, model_dir: str, device: str, dtype, attn: str, exact_length: bool):
        stub_audio_io_imports()
        import qwen_tts

        fix_default_rope()  # only matters with qwen-tts-hf on transformers 5 (compat.py)
        self.model = qwen_tts.Qwen3TTSModel.from_pretrained(model_dir, device_map=device, dtype=dtype,
                                                            attn_implementation=attn)
        self.speakers = set(self.model.get_supported_speakers() or ())
        self.languages = set(self.model.get_supported_languages() or ())
        if exact_length:
            self._exact_length()

    def _exact_length(self) -> None:
        """Mask EOS for every sampled token. `generate` hard-codes min_new_tokens=2 and forwards no
        other generation arguments, so the talker's own `generate` (transformers') is wrapped on
        this instance to set min_new_tokens to the max_new_tokens it is given."""
        talker = self.model.model.talker
        generate = talker.generate

        def generate_exact(*args, **kwargs):
            kwargs["min_new_tokens"] = kwargs["max_new_tokens"]
            return generate(*args, **kwargs)

        talker.generate = generate_exact

    def check(self, job: Job) -> None:
        check_voice(job, self.speakers, self.languages)

    def synthesize(self, job: Job) -> Iterator[np.ndarray]:
        kwargs = dict(job.sampling)
        frames = job.frames if job.frames is not None else job.max_frames
        if frames is not None:
            kwargs["max_new_tokens"] = frames + 1
        wavs, sample_rate = self.model.generate_custom_voice(
            text=job.text, speaker=job.voice, language=job.language, instruct=job.instruct,
            non_streaming_mode=True, **kwargs)  # our server's layout for a whole text too
        check_sample_rate(sample_rate)
        yield wavs[0]


def main(argv: list[str] | None = None) -> None:
    parser = arg_parser("qwen_tts", "The official qwen-tts package (non-streaming) behind POST /v1/audio/speech.",
                        port=8101)
    args = parse_args(parser, argv)
    serve(args, NAME, lambda: OfficialQwenTTS(str(args.model), args.device, args.torch_dtype, args.attn,
                                              exact_length=args.config.is_random))


if __name__ == "__main__":
    main(sys.argv[1:])
