"""What the peer packages need to import and load on our machines, and nothing more.

1. Audio-I/O imports. qwen-tts (and qwen-tts-hf, and faster-qwen3-tts's model module) import
   librosa, soundfile, sox, torchaudio, onnxruntime at the top for reference-audio loading,
   resampling, the 25 Hz tokenizer and the Base models' speaker encoder. A CustomVoice request
   calls none of them, the GPU machine lacks most of them, and they cannot be installed there
   without carrying a dozen more wheels. We reuse the stand-ins of our parity tests
   (tests/official): only for modules that are really missing, and each raises if called, so a
   benchmark can never silently depend on one.
2. qwen-tts-hf 0.1.1.post1 (the transformers-5 build faster-qwen3-tts depends on) registers a
   "default" RoPE initialiser that reads `config.rope_theta`. Transformers 5.17 prefers that
   registry entry over each model's own method when it initialises non-persistent buffers, and its
   MimiConfig (the codec's encoder) keeps the base only in `rope_parameters`, so loading any
   checkpoint fails with "'MimiConfig' object has no attribute 'rope_theta'".
   `fix_default_rope()` swaps in an initialiser that reads either place. Checked on CPU: with it,
   qwen-tts-hf on transformers 5.17 gives the same greedy codes and PCM on the tiny checkpoint as
   qwen-tts 0.1.1 on transformers 4.57.3.
"""

from __future__ import annotations

import logging

import torch

log = logging.getLogger("bench.peers")


def stub_audio_io_imports() -> None:
    try:
        from tests.official import install_import_stubs
    except ImportError as e:  # run from somewhere other than the repository root
        raise SystemExit("run the peer adapters from the repository root (python -m bench.peers...)") from e
    install_import_stubs()


def _default_rope(config, device=None, seq_len=None, layer_type=None):
    """Plain RoPE inverse frequencies (no scaling), for configs of either transformers major."""
    params = getattr(config, "rope_parameters", None) or {}
    base = getattr(config, "rope_theta", None) or params["rope_theta"]
    factor = getattr(config, "partial_rotary_factor", None) or params.get("partial_rotary_factor", 1.0)
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dim = int(head_dim * factor)
    exponents = torch.arange(0, dim, 2, dtype=torch.int64).to(device=device, dtype=torch.float) / dim
    return 1.0 / (base**exponents), 1.0


def fix_default_rope() -> None:
    """Call after `import qwen_tts`; a no-op unless qwen-tts-hf's registry entry is there."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    current = ROPE_INIT_FUNCTIONS.get("default")
    if current is not None and current.__module__ == "qwen_tts._transformers_compat":
        ROPE_INIT_FUNCTIONS["default"] = _default_rope
        log.info("replaced qwen-tts-hf's default RoPE initialiser (see bench/peers/compat.py)")
