"""The official `qwen-tts` 0.1.1 package, instantiated offline: ground truth for parity tests.

qwen-tts is installed with `--no-deps` (its declared deps pin torchaudio and gradio, which have
no build for the newest torch). Its import chain touches librosa, soundfile, sox, onnxruntime and
torchaudio only for audio file I/O, resampling, the 25 Hz tokenizer and the speaker encoder of the
Base models, none of which a CustomVoice/VoiceDesign parity run calls. `install_import_stubs()`
puts empty stand-ins for exactly those modules into `sys.modules` (only where the real package is
missing); calling any stubbed function raises, so a parity run can never silently depend on one.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types
import warnings

_STUBBED = ["librosa", "librosa.filters", "soundfile", "sox", "onnxruntime", "torchaudio",
            "torchaudio.compliance", "torchaudio.compliance.kaldi", "gradio"]


def _unavailable(name: str):
    def fn(*args, **kwargs):
        raise RuntimeError(f"{name} is stubbed for parity tests and must not be called")

    return fn


def _stub_attr(module: str, attr: str):
    if attr.startswith("__"):
        raise AttributeError(attr)
    return _unavailable(f"{module}.{attr}")


def _really_installed(root: str) -> bool:
    """Installed and importable. A package that is there but fails to import (e.g. a torchaudio
    built for another torch, on a machine whose image we do not control) is stubbed like a missing
    one, with a warning: the stubs stand in for exactly what a parity or peer run never calls."""
    mod = sys.modules.get(root)
    if mod is not None:
        return not getattr(mod, "__cadence_stub__", False)
    if importlib.util.find_spec(root) is None:
        return False
    try:
        importlib.import_module(root)
    except Exception as e:  # any failure to import means: not usable here
        for name in [n for n in sys.modules if n == root or n.startswith(root + ".")]:
            del sys.modules[name]
        warnings.warn(f"{root} is installed but fails to import ({type(e).__name__}: {e}); stubbed", stacklevel=3)
        return False
    return True


def install_import_stubs() -> None:
    for name in _STUBBED:
        if name in sys.modules or _really_installed(name.split(".")[0]):
            continue
        mod = types.ModuleType(name)
        mod.__cadence_stub__ = True
        # transformers probes optional packages with find_spec(), which needs a __spec__.
        mod.__spec__ = importlib.machinery.ModuleSpec(name, loader=None)
        mod.__getattr__ = lambda attr, _n=name: _stub_attr(_n, attr)
        sys.modules[name] = mod
        parent, _, child = name.rpartition(".")
        if parent:
            setattr(sys.modules[parent], child, mod)


def official_available() -> bool:
    return importlib.util.find_spec("qwen_tts") is not None and importlib.util.find_spec(
        "transformers") is not None


def use_transformers_mel_filterbank() -> None:
    """Stand-in for librosa in the official speaker-encoder path, named as such.

    The official `mel_spectrogram` calls `librosa.filters.mel` (Slaney scale and area norm), and
    librosa is not installed here. transformers' `audio_utils.mel_filter_bank` with
    `norm="slaney", mel_scale="slaney"` is an independent implementation of the same filterbank
    (it documents matching librosa); the official module's reference to librosa's function is
    pointed at it. Everything else in the official path runs unchanged.
    """
    import qwen_tts.core.models.modeling_qwen3_tts as official_model
    from transformers.audio_utils import mel_filter_bank

    def mel(sr, n_fft, n_mels, fmin, fmax):
        return mel_filter_bank(num_frequency_bins=n_fft // 2 + 1, num_mel_filters=n_mels, min_frequency=fmin,
                               max_frequency=fmax, sampling_rate=sr, norm="slaney", mel_scale="slaney").T

    official_model.librosa_mel_fn = mel
