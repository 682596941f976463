"""The two forms of the weighted average (Notation page; Turner eqs. 1-2)."""

import pytest
import torch
import torch.nn.functional as F

import transformer_course as tc

SHAPES = [(1, 4, 3), (2, 5, 8), (3, 2, 7, 4)]  # (..., N, D)


def softmax_weights(*shape):
    return torch.softmax(torch.randn(*shape, dtype=torch.float64), dim=-1)


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("seed", [0, 1])
def test_row_average_equals_torch_attention(shape, seed):
    """Attention with weights softmax(q k^T) is average_rows: check against
    torch's scaled_dot_product_attention (scale=1), values and gradients."""
    torch.manual_seed(seed)
    *batch, n, d = shape
    q = torch.randn(*batch, n, d, dtype=torch.float64, requires_grad=True)
    k = torch.randn(*batch, n, d, dtype=torch.float64, requires_grad=True)
    v = torch.randn(*batch, n, d, dtype=torch.float64, requires_grad=True)

    ours = tc.average_rows(torch.softmax(q @ k.transpose(-2, -1), dim=-1), v)
    reference = F.scaled_dot_product_attention(q, k, v, scale=1.0)
    torch.testing.assert_close(ours, reference)

    upstream = torch.randn_like(ours)
    grads = torch.autograd.grad(ours, (q, k, v), upstream)
    reference_grads = torch.autograd.grad(reference, (q, k, v), upstream)
    for got, expected in zip(grads, reference_grads, strict=True):
        torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("shape", SHAPES)
def test_columns_and_rows_agree(shape):
    torch.manual_seed(0)
    *batch, n, d = shape
    x = torch.randn(*batch, n, d, dtype=torch.float64)
    A = softmax_weights(*batch, n, n)
    turner = tc.average_columns(tc.to_columns(x), A.transpose(-2, -1))  # (..., D, N)
    torch.testing.assert_close(tc.to_rows(turner), tc.average_rows(A, x))


def test_turner_equation_one_elementwise():
    """y_n = sum_n' x_n' A[n', n] (Turner eq. 1), written as a loop."""
    torch.manual_seed(0)
    X = torch.randn(3, 4, dtype=torch.float64)  # (D, N)
    A = torch.softmax(torch.randn(4, 4, dtype=torch.float64), dim=0)  # columns sum to 1
    Y = tc.average_columns(X, A)
    for n in range(4):
        expected = sum(X[:, m] * A[m, n] for m in range(4))
        torch.testing.assert_close(Y[:, n], expected)


def test_gradcheck_both_forms():
    torch.manual_seed(0)
    x = torch.randn(2, 4, 3, dtype=torch.float64, requires_grad=True)
    logits = torch.randn(2, 4, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(
        lambda s, x: tc.average_rows(torch.softmax(s, -1), x), (logits, x)
    )
    assert torch.autograd.gradcheck(
        lambda s, x: tc.average_columns(tc.to_columns(x), torch.softmax(s, -2)),
        (logits, x),
    )


def test_weights_must_be_normalised_the_right_way():
    A = softmax_weights(4, 4)
    x = torch.randn(4, 3, dtype=torch.float64)
    with pytest.raises(ValueError, match="rows of A must each sum to 1"):
        tc.average_rows(A.T * 2, x)
    with pytest.raises(ValueError, match="columns of A must each sum to 1"):
        tc.average_columns(tc.to_columns(x), A * 2)


def test_shape_mismatch_names_both_shapes():
    with pytest.raises(
        tc.ShapeError,
        match=r"x: expected shape \(\.\.\., N, D\) with N=4, got \(5, 3\)",
    ):
        tc.average_rows(softmax_weights(4, 4), torch.randn(5, 3, dtype=torch.float64))
    with pytest.raises(
        tc.ShapeError, match=r"A \(rows\): expected shape \(\.\.\., N, N\)"
    ):
        tc.average_rows(softmax_weights(4, 5), torch.randn(4, 3, dtype=torch.float64))
