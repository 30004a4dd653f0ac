"""Cadence TTS engine: Qwen3-TTS 12 Hz model, runtime and serving."""
