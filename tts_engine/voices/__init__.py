"""Cloned voices for the Base models: reference audio -> a prompt computed once and kept.

audio.py (bytes -> checked 24 kHz mono) · mel.py + speaker_encoder.py (speaker embedding) ·
codec_encoder.py (reference codes for in-context cloning) · clone.py (the prompt and how it is
made) · store.py (voice ids, kept across requests and restarts).
"""
