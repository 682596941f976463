"""transformer_course.norms (chapter 4), against torch's fused normalisations."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import transformer_course as tc
from transformer_course import norms

F64 = torch.float64
SHAPES = [(7, 8), (2, 5, 8), (2, 3, 4, 16)]


def inputs(shape, seed, affine=True):
    """x (..., D) and γ, β (D,), all float64 and requiring gradients."""
    g = torch.Generator().manual_seed(seed)
    D = shape[-1]
    x = (3 * torch.randn(shape, dtype=F64, generator=g) + 1).requires_grad_()
    if not affine:
        return x, None, None
    weight = (1 + 0.5 * torch.randn(D, dtype=F64, generator=g)).requires_grad_()
    bias = torch.randn(D, dtype=F64, generator=g).requires_grad_()
    return x, weight, bias


def assert_same_values_and_gradients(ours, reference, leaves):
    torch.testing.assert_close(ours, reference)
    upstream = torch.randn_like(ours)
    leaves = [t for t in leaves if t is not None]
    got = torch.autograd.grad(ours, leaves, upstream)
    want = torch.autograd.grad(reference, leaves, upstream)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("eps", [1e-5, 1e-2])
def test_layer_norm_equals_torch(shape, seed, affine, eps):
    x, weight, bias = inputs(shape, seed, affine)
    ours = norms.layer_norm(x, weight, bias, eps)
    reference = F.layer_norm(x, (shape[-1],), weight, bias, eps)
    assert_same_values_and_gradients(ours, reference, [x, weight, bias])


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("affine", [True, False])
def test_rms_norm_equals_torch(shape, seed, affine):
    x, weight, _ = inputs(shape, seed, affine)
    ours = norms.rms_norm(x, weight, eps=1e-6)
    reference = F.rms_norm(x, (shape[-1],), weight, eps=1e-6)
    assert_same_values_and_gradients(ours, reference, [x, weight])


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_tokens_equals_torch_batch_norm(seed, affine):
    x, weight, bias = inputs((3, 5, 8), seed, affine)
    ours = norms.batch_norm_tokens(x, weight, bias, eps=1e-5)
    reference = F.batch_norm(
        x.transpose(1, 2), None, None, weight, bias, training=True, eps=1e-5
    ).transpose(1, 2)  # BatchNorm1d wants (B, D, N)
    assert_same_values_and_gradients(ours, reference, [x, weight, bias])


@pytest.mark.parametrize(
    ("ours", "reference"),
    [
        (
            lambda fused: tc.LayerNorm(8, eps=1e-4, fused=fused),
            lambda: nn.LayerNorm(8, eps=1e-4),
        ),
        (
            lambda fused: tc.LayerNorm(8, bias=False, fused=fused),
            lambda: nn.LayerNorm(8, bias=False),
        ),
        (
            lambda fused: tc.RMSNorm(8, eps=1e-4, fused=fused),
            lambda: nn.RMSNorm(8, eps=1e-4),
        ),
    ],
    ids=["layer", "layer-no-bias", "rms"],
)
@pytest.mark.parametrize("fused", [True, False], ids=["fused", "written-out"])
def test_modules_load_torch_state_dicts_and_agree(ours, reference, fused):
    """Both paths of the modules: torch's fused kernel and the equation step by step."""
    torch.manual_seed(0)
    ours, reference = ours(fused).double(), reference().double()
    with torch.no_grad():
        for p in reference.parameters():
            p.normal_()
    ours.load_state_dict(reference.state_dict())  # strict: the names match
    x = torch.randn(2, 5, 8, dtype=F64, requires_grad=True)
    out, expected = ours(x), reference(x)
    assert_same_values_and_gradients(out, expected, [x])
    upstream = torch.randn_like(out)
    got = torch.autograd.grad(ours(x), list(ours.parameters()), upstream)
    want = torch.autograd.grad(reference(x), list(reference.parameters()), upstream)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("seed", [0, 1])
def test_layer_norm_gives_each_token_mean_zero_and_variance_one(seed):
    x, _, _ = inputs((2, 5, 16), seed, affine=False)
    out = norms.layer_norm(x.detach(), eps=0.0)
    zeros = torch.zeros(2, 5, dtype=F64)
    torch.testing.assert_close(out.mean(-1), zeros)
    torch.testing.assert_close(out.var(-1, unbiased=False), zeros + 1)


@pytest.mark.parametrize("seed", [0, 1])
def test_shift_and_scale_of_a_token_change_nothing(seed):
    x, weight, bias = inputs((2, 5, 16), seed)
    g = torch.Generator().manual_seed(seed + 10)
    scale = torch.rand(2, 5, 1, dtype=F64, generator=g) * 10 + 0.1  # per token
    shift = torch.randn(2, 5, 1, dtype=F64, generator=g) * 10
    torch.testing.assert_close(
        norms.layer_norm(scale * x + shift, weight, bias, eps=0.0),
        norms.layer_norm(x, weight, bias, eps=0.0),
    )
    torch.testing.assert_close(
        norms.rms_norm(scale * x, weight, eps=0.0), norms.rms_norm(x, weight, eps=0.0)
    )


def test_layer_norm_is_per_token_but_batch_norm_mixes_the_batch():
    x, _, _ = inputs((3, 5, 8), 0, affine=False)
    x = x.detach()
    changed = x.clone()
    changed[1:] = 10 * torch.randn(2, 5, 8, dtype=F64)  # other sequences only
    torch.testing.assert_close(
        norms.layer_norm(changed)[0], norms.layer_norm(x)[0]
    )  # sequence 0 is untouched
    assert not torch.allclose(
        norms.batch_norm_tokens(changed)[0], norms.batch_norm_tokens(x)[0]
    )  # sequence 0 moved with the batch statistics


@pytest.mark.parametrize(
    "call",
    [
        lambda x: tc.LayerNorm(8)(x),
        lambda x: tc.RMSNorm(8)(x),
        lambda x: norms.layer_norm(x, torch.ones(8), torch.zeros(8)),
        lambda x: norms.rms_norm(x, torch.ones(8)),
        lambda x: norms.batch_norm_tokens(x, torch.ones(8), torch.zeros(8)),
    ],
    ids=["LayerNorm", "RMSNorm", "layer_norm", "rms_norm", "batch_norm_tokens"],
)
def test_a_wrong_width_names_expected_and_given_shapes(call):
    with pytest.raises(
        tc.ShapeError,
        match=r"x: expected shape \(\.\.\., D\) with D=8, got \(2, 5, 6\)",
    ):
        call(torch.randn(2, 5, 6))


def test_gain_and_shift_must_match():
    with pytest.raises(tc.ShapeError, match=r"bias: expected shape \(D\) with D=8"):
        norms.layer_norm(torch.randn(2, 8), torch.ones(8), torch.zeros(6))


@pytest.mark.parametrize("name", norms.__all__)
def test_every_public_object_names_its_chapter(name):
    assert "Chapter" in getattr(norms, name).__doc__
