"""SnakeBeta as one kernel equals the model's torch form (inside the codec: tests/kernels/test_codec_fast_path.py)."""

from __future__ import annotations

import pytest
import torch

from tts_engine.kernels.snake import residual_bias_add, residual_bias_add_ref, snake_beta, snake_beta_ref


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("shape", [(2, 3, 5), (1, 7, 1100), (3, 2, 16)])
def test_snake_beta_equals_reference(device, shape, dtype, tol):
    g = torch.Generator().manual_seed(shape[-1])
    x = (torch.randn(shape, generator=g) * 2).to(device, dtype)
    alpha = (torch.randn(shape[1], generator=g) * 0.5).to(device, dtype)  # logs of the frequency
    beta = (torch.randn(shape[1], generator=g) * 0.5).to(device, dtype)
    got, want = snake_beta(x, alpha, beta), snake_beta_ref(x, alpha, beta)
    assert got.dtype == want.dtype == dtype and got.shape == want.shape
    err = ((got.float() - want.float()).abs() / (1 + want.float().abs())).max().item()
    assert err <= tol, f"snake {shape} {dtype}: relative error {err:.2e}"


def test_snake_beta_reads_a_strided_input(device):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 9, 4, generator=g).to(device).transpose(1, 2)  # [2, 4, 9], not contiguous
    alpha, beta = torch.randn(4, generator=g).to(device), torch.randn(4, generator=g).to(device)
    assert torch.allclose(snake_beta(x, alpha, beta), snake_beta_ref(x, alpha, beta), atol=1e-5, rtol=1e-5)


def test_snake_beta_rejects_a_channel_mismatch(device):
    with pytest.raises(ValueError, match="channels"):
        snake_beta(torch.zeros(1, 3, 4, device=device), torch.zeros(2, device=device), torch.zeros(2, device=device))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 3e-2)])
def test_snake_beta_with_a_bias_equals_reference(device, dtype, tol):
    g = torch.Generator().manual_seed(5)
    x = (torch.randn(2, 6, 300, generator=g) * 2).to(device, dtype)
    alpha, beta, bias = ((torch.randn(6, generator=g) * 0.5).to(device, dtype) for _ in range(3))
    got, want = snake_beta(x, alpha, beta, bias), snake_beta_ref(x, alpha, beta, bias)
    err = ((got.float() - want.float()).abs() / (1 + want.float().abs())).max().item()
    assert err <= tol, f"{dtype}: relative error {err:.2e}"
    # The bias is really added: without it the output differs.
    assert not torch.allclose(got.float(), snake_beta(x, alpha, beta).float(), atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_residual_bias_add_equals_reference(device, dtype):
    g = torch.Generator().manual_seed(6)
    x, y = ((torch.randn(3, 5, 77, generator=g) * 3).to(device, dtype) for _ in range(2))
    bias = torch.randn(5, generator=g).to(device, dtype)
    got, want = residual_bias_add(x, y, bias), residual_bias_add_ref(x, y, bias)
    assert got.dtype == dtype
    # The same two roundings as the reference: equal, bit for bit.
    assert torch.equal(got, want)


def test_residual_bias_add_rejects_mismatched_inputs(device):
    x = torch.zeros(1, 3, 4, device=device)
    with pytest.raises(ValueError, match="channels"):
        residual_bias_add(x, x, torch.zeros(2, device=device))
    with pytest.raises(ValueError, match="must match"):
        residual_bias_add(x, torch.zeros(1, 3, 5, device=device), torch.zeros(3, device=device))


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 3e-2)])
def test_channels_last_inputs_keep_their_layout_and_values(device, dtype, tol):
    """The codec's channels-last blocks: x [B, C, T] with channels contiguous goes through the flat kernels and
    comes back in that layout (no copy to channels-first), equal to the reference."""
    g = torch.Generator().manual_seed(7)
    x, y = ((torch.randn(2, 1500, 24, generator=g) * 2).to(device, dtype).transpose(1, 2) for _ in range(2))
    alpha, beta, bias = ((torch.randn(24, generator=g) * 0.5).to(device, dtype) for _ in range(3))
    for got, want in ((snake_beta(x, alpha, beta), snake_beta_ref(x, alpha, beta)),
                      (snake_beta(x, alpha, beta, bias), snake_beta_ref(x, alpha, beta, bias))):
        assert got.shape == x.shape and got.transpose(1, 2).is_contiguous() and not got.is_contiguous()
        err = ((got.float() - want.float()).abs() / (1 + want.float().abs())).max().item()
        assert err <= tol
    got = residual_bias_add(x, y, bias)
    assert got.transpose(1, 2).is_contiguous() and torch.equal(got, residual_bias_add_ref(x, y, bias))
    got = residual_bias_add(x, y.contiguous(), bias)  # y channels-first: read in x's layout
    assert got.transpose(1, 2).is_contiguous() and torch.equal(got, residual_bias_add_ref(x, y, bias))
