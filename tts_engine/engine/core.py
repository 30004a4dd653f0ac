"""StreamingEngine: one engine thread that turns streams of text into streams of audio.

Data flow of one stream:
  open_stream()  -> validate, admit (or AdmissionError), command "open" to the engine thread
  engine step    -> text: incremental tokenisation commits stable BPE tokens
                 -> prefill: prompt rows -> ModelRunner.prefill(slot)        (phase QUEUED)
                 -> frame steps: ModelRunner.frame_step(batch)               (phase DECODING)
                 -> codec: due chunks (chunk schedule) of all streams, batched by length ->
                    CodecRunner.decode (state per slot) -> onset trimming -> AudioEvent (+ word timings)
                 -> EOS / length / cancel: slot freed, DoneEvent             (phase FINISHED)
The scheduling decisions come from `scheduler.policy.plan_step` (no torch).
"""

from __future__ import annotations

import asyncio
import itertools
import queue
import secrets
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from ..checkpoint import speech_frames
from ..loading import load_checkpoint
from ..prompt import Layout, assistant_text, build_prompt, instruct_text, resolve_voice
from ..runtime.codec_runner import CodecRunner
from ..runtime.runner import ModelRunner
from ..scheduler.policy import plan_step
from ..scheduler.request import Phase, StreamState
from ..text_stream import StreamingTokenizer
from .api import AdmissionError, DoneEvent, EngineUnavailable, ErrorEvent, FlushDoneEvent, StreamOptions
from .stream import Stream
from .streamout import StreamOutput


@dataclass
class _Entry:
    """Engine-thread-only bookkeeping of one stream."""

    state: StreamState
    handle: Stream
    options: StreamOptions
    tokenizer: StreamingTokenizer | None
    out: StreamOutput
    pending_frames: list[torch.Tensor] = field(default_factory=list)  # [16] codes on CPU
    flush_targets: deque[int] = field(default_factory=deque)


class StreamingEngine:
    def __init__(self, model_dir: str | Path, *, device: str = "cpu", dtype: torch.dtype | None = None,
                 max_active_streams: int = 32, max_queued_streams: int = 64, max_context: int = 2048,
                 max_text_chars: int = 20_000, use_graphs: bool | None = None, use_triton: bool | None = None):
        self.device = torch.device(device)
        if dtype is None:
            dtype = torch.bfloat16 if self.device.type == "cuda" else torch.float32
        ckpt = load_checkpoint(model_dir, device=self.device, dtype=dtype)
        self.path, self.model_config, self.defaults = ckpt.path, ckpt.cfg, ckpt.defaults
        self.tokenizer, self.codec = ckpt.tokenizer, ckpt.codec
        self.runner = ModelRunner(ckpt.model, max_slots=max_active_streams, max_context=max_context,
                                  use_graphs=use_graphs, use_triton=use_triton)
        # The codec state of a stream lives in the codec runner's row of its engine slot.
        self.codec_runner = CodecRunner(self.codec, max_active_streams, use_graphs=use_graphs)
        self.max_active, self.max_queued = max_active_streams, max_queued_streams
        self.max_text_chars = max_text_chars
        self._role_ids = self.tokenizer.encode("<|im_start|>assistant\n")
        self._tail_ids = self.tokenizer.encode("<|im_end|>\n<|im_start|>assistant\n")
        self._commands: queue.SimpleQueue = queue.SimpleQueue()
        self._wake = threading.Event()
        self._lock = threading.Lock()
        self._admitted = 0
        self._entries: dict[str, _Entry] = {}
        self._free_slots = list(range(max_active_streams))
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._ready = threading.Event()
        self.fault: BaseException | None = None
        self.step_count = 0
        self.stats = {"rejected": 0, "admitted": 0, "finished": 0, "cancelled": 0, "frames": 0,
                      "last_step_ms": 0.0, "last_batch": 0, "ttfa_sum_s": 0.0, "ttfa_count": 0}

    # -- lifecycle -------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        return self._ready.is_set() and self.fault is None and not self._stopping

    @property
    def alive(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.fault is None

    def start_thread(self, warmup: bool = True) -> None:
        self._thread = threading.Thread(target=self._run, args=(warmup,), name="cadence-engine", daemon=True)
        self._thread.start()

    async def start(self, warmup: bool = True) -> None:
        self.start_thread(warmup)
        await asyncio.get_running_loop().run_in_executor(None, self._ready.wait)
        if self.fault is not None:
            raise EngineUnavailable(f"engine failed during warm-up: {self.fault}")

    async def stop(self) -> None:
        self._stopping = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.get_running_loop().run_in_executor(None, self._thread.join, 10)

    def metrics(self) -> dict[str, float]:
        with self._lock:
            admitted = self._admitted
        active = sum(1 for e in list(self._entries.values()) if e.state.phase is Phase.DECODING)
        return {**self.stats, "active_streams": admitted, "decoding_streams": active,
                "queued_streams": admitted - active, "steps": self.step_count,
                "ready": float(self.ready), "healthy": float(self.fault is None)}

    # -- admission (caller's thread) ---------------------------------------------------------------
    def check_text(self, chars: int) -> None:
        """`chars`: the stream's whole text so far."""
        if chars > self.max_text_chars:
            raise ValueError(f"text is longer than {self.max_text_chars} characters")

    def open_stream(self, options: StreamOptions, text: str = "", *, end_input: bool = False) -> Stream:
        if not self.ready:
            raise EngineUnavailable("engine is not ready" if self.fault is None else f"engine failed: {self.fault}")
        options.validate()
        resolve_voice(self.model_config, options.voice)
        self.check_text(len(text))
        if end_input and not text.strip():
            raise ValueError("text is empty")
        with self._lock:
            if self._admitted >= self.max_active + self.max_queued:
                self.stats["rejected"] += 1
                raise AdmissionError(f"server is at capacity ({self._admitted} streams)", retry_after_s=1.0)
            self._admitted += 1
            self.stats["admitted"] += 1
        handle = Stream(self, f"s{next(self._ids)}", asyncio.get_running_loop())
        handle.text_chars = len(text)
        self.command("open", handle.id, (handle, options, text, end_input))
        return handle

    def command(self, kind: str, stream_id: str, payload=None) -> None:
        self._commands.put((kind, stream_id, payload))
        self._wake.set()

    # -- engine thread -----------------------------------------------------------------------------
    def _run(self, warmup: bool) -> None:
        try:
            if warmup:
                self._warmup()
            self._ready.set()
            while not self._stopping:
                if not self._step():
                    self._wake.wait(0.05)
                    self._wake.clear()
        except BaseException as exc:  # an engine fault must reach every stream
            self.fault = exc
            for entry in list(self._entries.values()):
                entry.handle.deliver(ErrorEvent(entry.state.id, f"engine failure: {exc}", "engine_error"))
            self._entries.clear()
            self._ready.set()
            raise

    def _warmup(self) -> None:
        if self.runner.use_graphs:
            self.runner.capture_graphs()
        if self.codec_runner.use_graphs:
            self.codec_runner.capture()
        self.codec_runner.decode([0], torch.zeros(1, 16, 2, dtype=torch.long))
        self.codec_runner.reset(0)

    def _step(self) -> bool:
        """One engine iteration; False when there was nothing to do."""
        did = self._drain_commands()
        now = time.monotonic()
        states = [e.state for e in self._entries.values()]
        cfg = self.model_config
        plan = plan_step(states, len(self._free_slots), max(self.runner.buckets), 4, now,
                         cfg.tts_eos_token_id, cfg.tts_pad_token_id)
        for sid in plan.prefill:
            entry = self._entries[sid]
            try:
                self._prefill(entry)
            except ValueError as exc:  # this stream's input cannot run (e.g. longer than the context)
                self._finish(entry, error=str(exc))
        if plan.decode:
            self._decode([self._entries[sid] for sid in plan.decode])
        did |= self._emit_audio(list(self._entries.values()))
        self.step_count += 1
        return did or not plan.empty

    def _drain_commands(self) -> bool:
        did = False
        while True:
            try:
                kind, sid, payload = self._commands.get_nowait()
            except queue.Empty:
                return did
            did = True
            if kind == "open":
                self._open(*payload)
                continue
            entry = self._entries.get(sid)
            if entry is None:
                continue
            if kind == "append":
                if entry.tokenizer is not None and not entry.state.content_ids and not entry.tokenizer.pending_text:
                    payload = payload.lstrip()  # as at open: leading whitespace is not text to speak
                self._add_text(entry, entry.tokenizer.push(payload) if entry.tokenizer else [])
            elif kind == "flush":
                if entry.tokenizer is not None:
                    self._add_text(entry, entry.tokenizer.finish())
                    entry.tokenizer = StreamingTokenizer(self.tokenizer)
                # Frame k needs text token k + 2, so the text so far yields frames 0 .. n - 2: a flush
                # completes when those exist and are sent. (The last token's frames need more text or
                # end of input, which feeds tts_eos.)
                entry.flush_targets.append(max(0, len(entry.state.content_ids) - 1))
            elif kind == "end":
                entry.state.input_ended = True
                self._add_text(entry, entry.tokenizer.finish() if entry.tokenizer is not None else [])
                if not entry.state.content_ids:
                    self._finish(entry, error="text is empty")
            elif kind == "cancel":
                entry.state.cancelled = True
                self._finish(entry, reason="cancelled")
            elif kind == "playout":
                entry.state.played_s, entry.state.played_at = payload

    def _open(self, handle: Stream, options: StreamOptions, text: str, end_input: bool) -> None:
        layout = options.layout or (Layout.NON_STREAMING if end_input else Layout.STREAMING)
        params = options.params
        seed = params.seed if params.seed is not None else secrets.randbits(63)
        forced = None
        if self.model_config.is_random:
            cps = float(self.model_config.random_weights.get("chars_per_second", 14.5))
            forced = speech_frames(text, cps) if end_input else None
        max_frames = options.max_frames or self.defaults.max_new_tokens
        max_frames = min(max_frames, self.runner.max_context - 1)
        state = StreamState(handle.id, layout, seed, max_frames, forced, options.chunk_schedule,
                            drop_first_frame=options.voice.speaker is not None)
        entry = _Entry(state, handle, options, None, StreamOutput(handle.id, options.silence_threshold_dbfs))
        # Token-to-frame timing exists only in the streaming layout.
        entry.out.timings_enabled = layout is Layout.STREAMING
        self._entries[handle.id] = entry
        if layout is Layout.NON_STREAMING:
            if not end_input:
                self._finish(entry, error="the non-streaming layout needs the whole text at open")
                return
            template = self.tokenizer.encode(assistant_text(text))
            state.input_ended = True
            self._add_text(entry, template[len(self._role_ids):len(template) - len(self._tail_ids)])
        else:
            entry.tokenizer = StreamingTokenizer(self.tokenizer)
            self._add_text(entry, entry.tokenizer.push(text.lstrip()))
            if end_input:
                state.input_ended = True
                self._add_text(entry, entry.tokenizer.finish())
        if state.input_ended and not state.content_ids:
            self._finish(entry, error="text is empty")

    def _add_text(self, entry: _Entry, ids: list[int]) -> None:
        state = entry.state
        state.content_ids.extend(ids)
        entry.out.add_tokens(ids, self.tokenizer)
        if state.phase is Phase.WAITING_TEXT and state.ready_for_prefill():
            state.phase = Phase.QUEUED
        if state.forced_frames is None and self.model_config.is_random and state.input_ended:
            cps = float(self.model_config.random_weights.get("chars_per_second", 14.5))
            state.forced_frames = speech_frames(self.tokenizer.decode(state.content_ids), cps)

    def _prefill(self, entry: _Entry) -> None:
        state, opts = entry.state, entry.options
        instruct_ids = self.tokenizer.encode(instruct_text(opts.voice.instruct)) if opts.voice.instruct else None
        prompt = build_prompt(self.model_config, [*self._role_ids, *state.content_ids, *self._tail_ids],
                              opts.voice, state.layout, instruct_ids)
        if len(prompt) >= self.runner.max_context - 1:
            raise ValueError(f"text is too long: its prompt of {len(prompt)} tokens exceeds the engine's "
                             f"context of {self.runner.max_context}")
        if len(prompt) + state.frame_limit >= self.runner.max_context:
            state.max_frames = max(1, self.runner.max_context - len(prompt) - 1)
        state.slot = self._free_slots.pop()
        self.codec_runner.reset(state.slot)  # a new stream decodes from scratch
        state.prompt_len = len(prompt)
        # Random weights never stop on EOS: their length comes from the text (forced_frames).
        self.runner.start_slot(state.slot, opts.params, state.seed, eos_allowed=not self.model_config.is_random)
        self.runner.prefill(state.slot, self.runner.embed_prompt(list(prompt.text_ids), list(prompt.codec_ids)))
        state.phase = Phase.DECODING

    def _decode(self, entries: list[_Entry]) -> None:
        cfg = self.model_config
        t0 = time.perf_counter()
        slots = [e.state.slot for e in entries]
        frames = [e.state.frames_done for e in entries]
        positions = [e.state.prompt_len + f for e, f in zip(entries, frames)]
        text = [e.state.step_text(f, cfg.tts_eos_token_id, cfg.tts_pad_token_id) for e, f in zip(entries, frames)]
        codes = self.runner.frame_step(slots, frames, positions, text).cpu()
        self.stats["last_step_ms"] = (time.perf_counter() - t0) * 1e3
        self.stats["last_batch"] = len(entries)
        eos = cfg.talker.codec_eos_token_id
        for entry, row in zip(entries, codes):
            state = entry.state
            if not self.model_config.is_random and int(row[0]) == eos:
                state.finish_reason = "eos"
                continue
            state.frames_done += 1
            self.stats["frames"] += 1
            if not (state.drop_first_frame and state.frames_done == 1):
                entry.pending_frames.append(row)
            if state.frames_done >= state.frame_limit:
                # A random-weight stream reaching its forced length is where a real one would emit EOS.
                forced = state.forced_frames is not None and state.frames_done >= state.forced_frames
                state.finish_reason = "eos" if forced else "length"

    def _emit_audio(self, entries: list[_Entry]) -> bool:
        """Decode pending frames on each stream's chunk schedule (streams whose chunks are due
        together share one codec call per chunk length); finish streams that are done."""
        did = False
        while True:
            by_length: dict[int, list[tuple[_Entry, list[torch.Tensor]]]] = {}
            for entry in entries:
                chunk = self._due_chunk(entry)
                if chunk:
                    by_length.setdefault(len(chunk), []).append((entry, chunk))
            if not by_length:
                break
            for group in by_length.values():
                self._decode_chunks(group)
            did = True
        for entry in entries:
            state = entry.state
            ending = state.finish_reason is not None
            skip = 1 if state.drop_first_frame else 0
            while entry.flush_targets and (ending or state.frames_decoded + skip >= entry.flush_targets[0]):
                entry.flush_targets.popleft()
                entry.handle.deliver(FlushDoneEvent(state.id))
            if ending and state.phase is not Phase.FINISHED:
                self._finish(entry, reason=state.finish_reason)
                did = True
        return did

    def _due_chunk(self, entry: _Entry) -> list[torch.Tensor]:
        """Take the stream's next chunk off its pending frames if it is due, else []."""
        state = entry.state
        ending = state.finish_reason is not None
        # A flush sends a short chunk only once every frame of the flushed text exists.
        flushing = bool(entry.flush_targets) and state.frames_done >= entry.flush_targets[0]
        want = state.next_chunk_frames()
        if not entry.pending_frames or (len(entry.pending_frames) < want and not (ending or flushing)):
            return []
        chunk, entry.pending_frames = entry.pending_frames[:want], entry.pending_frames[want:]
        return chunk

    @torch.inference_mode()
    def _decode_chunks(self, group: list[tuple[_Entry, list[torch.Tensor]]]) -> None:
        """One codec call for same-length chunks of several streams, then each stream's audio."""
        codes = torch.stack([torch.stack(frames).T for _, frames in group])  # [B, 16, t]
        pcm = self.codec_runner.decode([entry.state.slot for entry, _ in group], codes).float().cpu()
        for (entry, frames), row in zip(group, pcm):
            self._send_chunk(entry, len(frames), row.numpy())

    def _send_chunk(self, entry: _Entry, num_frames: int, pcm: np.ndarray) -> None:
        state = entry.state
        first_frame = state.frames_decoded + (1 if state.drop_first_frame else 0)
        state.frames_decoded += num_frames
        state.chunks_emitted += 1
        event = entry.out.audio(pcm, first_frame, num_frames,
                                final=state.finish_reason is not None and not entry.pending_frames,
                                first_audible_frame=1 if state.drop_first_frame else 0)
        if event is None:
            return
        now = time.monotonic()
        if state.first_audio_at is None:
            state.first_audio_at = now
            self.stats["ttfa_sum_s"] += now - state.arrival
            self.stats["ttfa_count"] += 1
        state.audio_sent_s += event.duration_s
        entry.handle.deliver(event)

    def _finish(self, entry: _Entry, reason: str = "eos", error: str | None = None) -> None:
        state = entry.state
        state.phase = Phase.FINISHED
        if state.slot is not None:
            self._free_slots.append(state.slot)
            state.slot = None
        self._entries.pop(state.id, None)
        with self._lock:
            self._admitted -= 1
        if error is not None:
            entry.handle.deliver(ErrorEvent(state.id, error, "invalid_input"))  # the server's 422 class
            return
        self.stats["cancelled" if reason == "cancelled" else "finished"] += 1
        entry.handle.deliver(DoneEvent(state.id, state.frames_decoded, entry.out.audio_s, reason))
