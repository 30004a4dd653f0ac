"""Log-mel spectrogram of the speaker encoder's input, as the official Base models compute it.

24 kHz mono, n_fft 1024, hop 256, window 1024 (Hann), 128 Slaney-scale mel bands over 0..12 kHz
with Slaney area normalisation (librosa's default filterbank), reflect padding of (n_fft - hop) / 2
on both sides and no centring, magnitude sqrt(re^2 + im^2 + 1e-9), natural log clamped at 1e-5.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

SAMPLE_RATE = 24000
N_FFT = 1024
HOP = 256
NUM_MELS = 128
F_MAX = 12000.0

# Slaney's mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above.
_F_SP = 200.0 / 3
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOG_STEP = np.log(6.4) / 27.0


def hz_to_mel(hz: np.ndarray) -> np.ndarray:
    hz = np.asarray(hz, dtype=np.float64)
    log_part = _MIN_LOG_MEL + np.log(np.maximum(hz, _MIN_LOG_HZ) / _MIN_LOG_HZ) / _LOG_STEP
    return np.where(hz >= _MIN_LOG_HZ, log_part, hz / _F_SP)


def mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    log_part = _MIN_LOG_HZ * np.exp(_LOG_STEP * (mel - _MIN_LOG_MEL))
    return np.where(mel >= _MIN_LOG_MEL, log_part, _F_SP * mel)


@functools.cache
def mel_filterbank(sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT, num_mels: int = NUM_MELS,
                   f_min: float = 0.0, f_max: float = F_MAX) -> np.ndarray:
    """Triangular filters [num_mels, n_fft // 2 + 1] (float32), each scaled to unit area."""
    fft_hz = np.linspace(0.0, sample_rate / 2, n_fft // 2 + 1)
    edges = mel_to_hz(np.linspace(hz_to_mel(f_min), hz_to_mel(f_max), num_mels + 2))  # [M + 2]
    widths = np.diff(edges)  # [M + 1]
    ramps = edges[:, None] - fft_hz[None, :]  # [M + 2, F]
    rising = -ramps[:-2] / widths[:-1, None]
    falling = ramps[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return weights.astype(np.float32)


def log_mel(wav: torch.Tensor) -> torch.Tensor:
    """wav [B, samples] float in [-1, 1] at 24 kHz -> log-mel [B, frames, 128]."""
    pad = (N_FFT - HOP) // 2
    x = torch.nn.functional.pad(wav[:, None], (pad, pad), mode="reflect")[:, 0]
    window = torch.hann_window(N_FFT, device=wav.device, dtype=wav.dtype)
    spec = torch.stft(x, N_FFT, hop_length=HOP, win_length=N_FFT, window=window, center=False,
                      return_complex=True)  # [B, F, frames]
    magnitude = torch.sqrt(torch.view_as_real(spec).pow(2).sum(-1) + 1e-9)
    basis = torch.from_numpy(mel_filterbank()).to(wav.device, wav.dtype)
    return torch.log(torch.clamp(basis @ magnitude, min=1e-5)).transpose(1, 2)
