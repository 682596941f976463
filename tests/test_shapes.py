import pytest
import torch

from transformer_course.shapes import ShapeError, expect_int, expect_shape


def test_binds_symbols_to_sizes():
    dims = expect_shape(torch.zeros(2, 5, 8), "B N D", "x")
    assert dims == {"B": 2, "N": 5, "D": 8}


@pytest.mark.parametrize("shape", [(5, 8), (2, 5, 8), (3, 2, 5, 8)])
def test_ellipsis_accepts_any_leading_dims(shape):
    assert expect_shape(torch.zeros(shape), "(..., N, D)")["N"] == 5


def test_repeated_symbol_must_agree():
    expect_shape(torch.zeros(4, 4), "N N")
    with pytest.raises(ShapeError, match=r"N must be 4, it is 3"):
        expect_shape(torch.zeros(4, 3), "N N", "A")


def test_message_names_tensor_expected_and_given_shape():
    with pytest.raises(ShapeError) as info:
        expect_shape(torch.zeros(2, 5, 4), "... N d", "q", d=8)
    message = str(info.value)
    assert message.startswith("q: expected shape (..., N, d) with d=8, got (2, 5, 4)")


def test_known_sizes_carry_across_tensors():
    dims = expect_shape(torch.zeros(3, 7, 8), "... N d", "q")
    expect_shape(torch.zeros(3, 9, 8), "... M d", "k", known=dims)
    with pytest.raises(ShapeError, match=r"k: .*d must be 8, it is 6"):
        expect_shape(torch.zeros(3, 9, 6), "... M d", "k", known=dims)


def test_wrong_rank_and_literal_sizes():
    with pytest.raises(ShapeError, match="needs 3 dimensions, has 2"):
        expect_shape(torch.zeros(2, 3), "B N D")
    with pytest.raises(ShapeError, match="needs at least 2 dimensions, has 1"):
        expect_shape(torch.zeros(3), "... N D")
    with pytest.raises(ShapeError, match="must be 3, it is 4"):
        expect_shape(torch.zeros(2, 4), "N 3")


def test_non_tensor_is_a_type_error():
    with pytest.raises(
        TypeError, match=r"expected a torch.Tensor of shape .* got list"
    ):
        expect_shape([[1.0]], "N D", "x")


def test_ellipsis_only_first():
    with pytest.raises(ValueError, match="may only lead"):
        expect_shape(torch.zeros(2, 2), "N ... D")


def test_shape_error_is_a_value_error():
    assert issubclass(ShapeError, ValueError)


@pytest.mark.parametrize(
    ("value", "least", "message"),
    [
        (True, None, r"n: expected an int, got True"),
        (2.0, None, r"n: expected an int, got 2\.0"),
        (0, 1, r"n: expected a positive int, got 0"),
        (-1, 0, r"n: expected an int ≥ 0, got -1"),
        (1, 2, r"n: expected an int ≥ 2, got 1"),
    ],
)
def test_expect_int_names_what_it_expected_and_got(value, least, message):
    with pytest.raises(ValueError, match=message):
        expect_int(value, "n", least=least)


def test_expect_int_returns_a_good_value():
    assert expect_int(3, "n", least=0) == 3
    assert expect_int(-5, "n") == -5
