import pytest
import torch

from transformer_course.shapes import (
    ShapeError,
    expect_bool,
    expect_choice,
    expect_int,
    expect_number,
    expect_probability,
    expect_shape,
    expect_token_ids,
)


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


@pytest.mark.parametrize(
    ("check", "bad", "message"),
    [
        (lambda v: expect_bool(v, "flag"), 1, r"flag: expected True or False, got 1"),
        (
            lambda v: expect_choice(v, "norm", ("layer", "rms")),
            "batch",
            r"norm: expected one of \['layer', 'rms'\], got 'batch'",
        ),
        (
            lambda v: expect_choice(v, "norm", ("layer", "rms")),
            ["layer"],  # unhashable: still the sentence, not a TypeError
            r"norm: expected one of \['layer', 'rms'\], got \['layer'\]",
        ),
        (
            lambda v: expect_number(v, "eps", above=0),
            0,
            r"eps: expected a number > 0, got 0",
        ),
        (
            lambda v: expect_number(v, "x", low=-1, high=0),
            0.5,
            r"x: expected a number ≥ -1 and ≤ 0, got 0.5",
        ),
        (lambda v: expect_number(v, "x"), True, r"x: expected a number, got True"),
        (
            lambda v: expect_probability(v, "dropout"),
            1.5,
            r"dropout: expected a probability in \[0, 1\], got 1.5",
        ),
        (
            lambda v: expect_probability(v, "dropout"),
            float("nan"),
            r"dropout: expected a probability in \[0, 1\], got nan",
        ),
    ],
)
def test_value_checks_name_what_was_expected_and_given(check, bad, message):
    with pytest.raises(ValueError, match=message):
        check(bad)


def test_value_checks_return_good_values():
    assert expect_bool(False, "flag") is False
    assert expect_choice("rms", "norm", {"layer": 1, "rms": 2}) == "rms"
    assert expect_number(1e-5, "eps", above=0) == 1e-5
    assert expect_probability(0, "dropout") == 0


@pytest.mark.parametrize(
    ("ids", "error", "message"),
    [
        (torch.zeros(2, 3), TypeError, r"ids: expected integer token ids, got dtype"),
        (torch.ones(2, 3, dtype=torch.bool), TypeError, "integer token ids"),
        (torch.tensor([[0, 5]]), ValueError, r"ids: expected token ids in 0\.\.4, got"),
        (torch.tensor([[-1, 2]]), ValueError, r"got values from -1 to 2"),
        (torch.zeros(3, dtype=torch.long), ShapeError, "ids"),
    ],
)
def test_token_ids_are_checked(ids, error, message):
    with pytest.raises(error, match=message):
        expect_token_ids(ids, 5)
    expect_token_ids(torch.tensor([[0, 4]]), 5)  # in range: no error
