"""bench.codec_profile: the parts it names cover the decoder, and its four layouts of a dilated conv agree."""

import pytest
import torch

from bench.codec_profile import as_ncw, conv_variants, top_parts
from tts_engine.config import CONFIG_DIR, CodecConfig
from tts_engine.model.codec import CodecDecoder


def test_parts_cover_every_top_level_piece_of_the_decoder():
    codec = CodecDecoder(CodecConfig.from_file(CONFIG_DIR / "tiny-speech_tokenizer.config.json").decoder)
    names = top_parts(codec)
    assert {"quantizer", "pre_conv", "pre_transformer", "upsample.0", "decoder.0", "decoder.1.res2"} <= set(names)
    units = [m for n, m in names.items() if ".res" in n]
    assert len(units) == 3 * (len(codec.decoder) - 3)


def test_the_layouts_of_a_dilated_conv_compute_the_same_conv():
    torch.manual_seed(0)
    conv = torch.nn.Conv1d(8, 8, 7, dilation=3, bias=False)
    with torch.no_grad():
        x, variants = conv_variants(conv, 2, 20, device="cpu")
        ref = torch.nn.functional.conv1d(x, conv.weight, dilation=3)
        for name, fn in variants.items():
            torch.testing.assert_close(as_ncw(fn(), 8), ref, msg=name, atol=1e-5, rtol=1e-5)


def test_ab_takes_only_boolean_codec_options():
    from bench.codec_profile import ab_names

    assert ab_names("codec_rope_kv,codec_conv_windows") == ["codec_rope_kv", "codec_conv_windows"]
    assert ab_names("") == []
    for bad in ("codec_window_max", "cp_graphs", "nonsense"):
        with pytest.raises(SystemExit, match="not a boolean codec option"):
            ab_names(bad)
