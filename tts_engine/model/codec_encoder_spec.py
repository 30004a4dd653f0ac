"""Names and shapes of the codec encoder's tensors, derived from `encoder_config` in plain Python.

A random-weight checkpoint must hold the complete official layout so that the reference package
loads it; tts_engine/voices/codec_encoder.py runs these tensors to encode reference audio. The
official encoder is transformers' Mimi model (SEANet conv encoder, transformer, stride-2
downsample, split RVQ) with its decoder-side parts (`upsample`, `decoder_transformer`, `decoder`)
removed. Defaults below are Mimi's own config
defaults, used where `encoder_config` omits a key. Codebooks store `initialized`,
`cluster_usage` and `embed_sum` as persistent buffers, so they are part of the layout.
"""

from __future__ import annotations

import math
from typing import Any

_MIMI_DEFAULTS: dict[str, Any] = {
    "sampling_rate": 24_000, "audio_channels": 1, "hidden_size": 512, "num_filters": 64,
    "num_residual_layers": 1, "upsampling_ratios": [8, 6, 5, 4], "kernel_size": 7,
    "last_kernel_size": 3, "residual_kernel_size": 3, "compress": 2, "codebook_size": 2048,
    "codebook_dim": 256, "num_quantizers": 32, "use_conv_shortcut": False,
    "vector_quantization_hidden_dimension": 256, "num_semantic_quantizers": 1,
    "num_hidden_layers": 8, "intermediate_size": 2048, "num_attention_heads": 8,
    "num_key_value_heads": 8, "head_dim": None, "attention_bias": False, "dilation_growth_rate": 2,
    "rope_theta": 10000.0, "sliding_window": 250, "norm_eps": 1e-5, "hidden_act": "gelu",
    "pad_mode": "constant", "use_causal_conv": True,
}


def encoder_settings(encoder_raw: dict[str, Any]) -> dict[str, Any]:
    """`encoder_config` with Mimi's defaults filled in."""
    return {**_MIMI_DEFAULTS, **encoder_raw}

Shapes = dict[str, tuple[int, ...]]


def _conv(shapes: Shapes, name: str, c_in: int, c_out: int, kernel: int, bias: bool = True) -> None:
    shapes[f"{name}.conv.weight"] = (c_out, c_in, kernel)
    if bias:
        shapes[f"{name}.conv.bias"] = (c_out,)


def frame_rates(c: dict[str, Any]) -> tuple[float, int]:
    """(frame rate of the codes, frame rate of the SEANet encoder output)."""
    hop = math.prod(c["upsampling_ratios"])
    seanet_rate = math.ceil(c["sampling_rate"] / hop)
    # Mimi's config keeps an explicit (legacy) `_frame_rate`/`frame_rate`; otherwise the rate
    # follows from the strides including the final stride-2 downsample.
    explicit = c.get("_frame_rate", c.get("frame_rate"))
    rate = explicit if explicit is not None else c["sampling_rate"] / (hop * 2)
    return rate, seanet_rate


def encoder_tensor_shapes(encoder_raw: dict[str, Any]) -> Shapes:
    """Every tensor of the official encoder's state_dict, names without the `encoder.` prefix."""
    c = encoder_settings(encoder_raw)
    shapes: Shapes = {}

    # SEANet: conv, then per ratio (reversed) residual blocks + ELU + strided conv doubling the
    # channels, then ELU + last conv. ELUs hold no tensors but take a list index.
    _conv(shapes, "encoder.layers.0", c["audio_channels"], c["num_filters"], c["kernel_size"])
    index, channels = 1, c["num_filters"]
    for ratio in reversed(c["upsampling_ratios"]):
        for _ in range(c["num_residual_layers"]):
            hidden = channels // c["compress"]
            _conv(shapes, f"encoder.layers.{index}.block.1", channels, hidden, c["residual_kernel_size"])
            _conv(shapes, f"encoder.layers.{index}.block.3", hidden, channels, 1)
            if c["use_conv_shortcut"]:
                _conv(shapes, f"encoder.layers.{index}.shortcut", channels, channels, 1)
            index += 1
        index += 1  # ELU
        _conv(shapes, f"encoder.layers.{index}", channels, 2 * channels, 2 * ratio)
        index += 1
        channels *= 2
    index += 1  # ELU
    _conv(shapes, f"encoder.layers.{index}", channels, c["hidden_size"], c["last_kernel_size"])

    hidden = c["hidden_size"]
    head_dim = c["head_dim"] or hidden // c["num_attention_heads"]
    q_dim, kv_dim = c["num_attention_heads"] * head_dim, c["num_key_value_heads"] * head_dim
    for i in range(c["num_hidden_layers"]):
        p = f"encoder_transformer.layers.{i}"
        for proj, (rows, cols) in {"q_proj": (q_dim, hidden), "k_proj": (kv_dim, hidden),
                                   "v_proj": (kv_dim, hidden), "o_proj": (hidden, q_dim)}.items():
            shapes[f"{p}.self_attn.{proj}.weight"] = (rows, cols)
            if c["attention_bias"]:
                shapes[f"{p}.self_attn.{proj}.bias"] = (rows,)
        shapes[f"{p}.mlp.fc1.weight"] = (c["intermediate_size"], hidden)
        shapes[f"{p}.mlp.fc2.weight"] = (hidden, c["intermediate_size"])
        for norm in ("input_layernorm", "post_attention_layernorm"):
            shapes[f"{p}.{norm}.weight"] = (hidden,)
            shapes[f"{p}.{norm}.bias"] = (hidden,)
        shapes[f"{p}.self_attn_layer_scale.scale"] = (hidden,)
        shapes[f"{p}.mlp_layer_scale.scale"] = (hidden,)

    rate, seanet_rate = frame_rates(c)
    if rate != seanet_rate:
        _conv(shapes, "downsample", hidden, hidden, 2 * int(seanet_rate / rate), bias=False)

    vq_dim = c["vector_quantization_hidden_dimension"]
    codebook_dim = c["codebook_dim"] or hidden
    n_semantic = c["num_semantic_quantizers"]
    groups = {"semantic_residual_vector_quantizer": n_semantic,
              "acoustic_residual_vector_quantizer": c["num_quantizers"] - n_semantic}
    for group, count in groups.items():
        p = f"quantizer.{group}"
        for i in range(count):
            shapes[f"{p}.layers.{i}.codebook.initialized"] = (1,)
            shapes[f"{p}.layers.{i}.codebook.cluster_usage"] = (c["codebook_size"],)
            shapes[f"{p}.layers.{i}.codebook.embed_sum"] = (c["codebook_size"], codebook_dim)
        if vq_dim != hidden:
            shapes[f"{p}.input_proj.weight"] = (vq_dim, hidden, 1)
            shapes[f"{p}.output_proj.weight"] = (hidden, vq_dim, 1)
    return shapes
