"""Text in, on the engine thread: a stream's scheduler state from its open, its content token ids,
and its prefill prompt once the text allows one. Knows the tokenizer, the model config and the
context length; not the engine's streams, slots or steps."""

from __future__ import annotations

import secrets

from ..checkpoint import speech_frames
from ..prompt import Layout, Prompt, assistant_text, build_prompt, instruct_text
from ..scheduler.request import StreamState
from .api import StreamOptions


class TextIntake:
    def __init__(self, tokenizer, model_config, defaults, max_context: int):
        self.tokenizer, self.model_config, self.defaults = tokenizer, model_config, defaults
        self.max_context = max_context
        self._role_ids = tokenizer.encode("<|im_start|>assistant\n")
        self._tail_ids = tokenizer.encode("<|im_end|>\n<|im_start|>assistant\n")
        # Random weights never stop on EOS: a stream's length comes from its text at this rate.
        cps = model_config.random_weights.get("chars_per_second", 14.5) if model_config.is_random else None
        self.chars_per_second = float(cps) if cps is not None else None

    def new_state(self, stream_id: str, options: StreamOptions, text: str, end_input: bool) -> StreamState:
        layout = options.layout or (Layout.NON_STREAMING if end_input else Layout.STREAMING)
        if options.voice.cloned is not None and options.voice.cloned.in_context:
            layout = Layout.NON_STREAMING  # its prompt holds the whole text (docs/models.md)
        seed = options.params.seed if options.params.seed is not None else secrets.randbits(63)
        forced = speech_frames(text, self.chars_per_second) if self.chars_per_second is not None and end_input else None
        max_frames = min(options.max_frames or self.defaults.max_new_tokens, self.max_context - 1)
        return StreamState(stream_id, layout, seed, max_frames, forced, options.chunk_schedule,
                           drop_first_frame=options.voice.speaker is not None and options.voice.cloned is None)

    def content_ids(self, text: str) -> list[int]:
        """The whole text's content tokens as the non-streaming layout takes them (the tokenised
        assistant turn without its role and tail)."""
        template = self.tokenizer.encode(assistant_text(text))
        return template[len(self._role_ids):len(template) - len(self._tail_ids)]

    def forced_frames(self, content_ids: list[int]) -> int | None:
        """Random weights: the frames a stream of these (final) content tokens runs for."""
        if self.chars_per_second is None:
            return None
        return speech_frames(self.tokenizer.decode(content_ids), self.chars_per_second)

    def prompt(self, state: StreamState, options: StreamOptions) -> Prompt:
        """The prefill rows; the streaming layout's prompt holds only the first text token, so it
        is final as soon as that token is committed. A prompt that leaves too little context
        shortens the stream's frame limit; one that leaves none is a ValueError."""
        voice = options.voice
        instruct_ids = self.tokenizer.encode(instruct_text(voice.instruct)) if voice.instruct else None
        prompt = build_prompt(self.model_config, [*self._role_ids, *state.content_ids, *self._tail_ids],
                              voice, state.layout, instruct_ids)
        if len(prompt) >= self.max_context - 1:
            raise ValueError(f"text is too long: its prompt of {len(prompt)} tokens exceeds the engine's "
                             f"context of {self.max_context}")
        if len(prompt) + state.frame_limit >= self.max_context:
            state.max_frames = max(1, self.max_context - len(prompt) - 1)
        return prompt
