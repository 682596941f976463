"""The experiment helpers of chapters 4 and 5 (``tc.digit_rows``,
``tc.position_tasks``), which the chapters and their benchmarks share."""

import pytest
import torch

import transformer_course as tc
from transformer_course.digit_rows import (
    RowClassifier,
    rise_after,
    row_accuracy,
    rows_as_tokens,
    train_rows,
)
from transformer_course.position_tasks import (
    ENCODINGS,
    LAG,
    TokenModel,
    lag_accuracy,
    lag_batch,
    lag_loss,
    train_lag,
)


@pytest.fixture(scope="module")
def digits():
    return tc.load_digits()


def test_rows_as_tokens_puts_each_row_then_its_number(digits):
    images = digits.x_test[:3]  # (3, 1, 8, 8)
    tokens = rows_as_tokens(images)
    assert tokens.shape == (3, 8, 16)
    torch.testing.assert_close(tokens[:, :, :8], images[:, 0])  # the pixels
    torch.testing.assert_close(tokens[1, :, 8:], torch.eye(8))  # row n: one-hot n
    with pytest.raises(tc.ShapeError, match=r"images: expected shape"):
        rows_as_tokens(torch.zeros(3, 8, 8))


def test_the_row_classifier_scores_ten_classes_and_names_a_wrong_input():
    model = RowClassifier(tc.BlockConfig(d_model=16, n_heads=2), n_blocks=2)
    assert model(torch.zeros(5, 8, 16)).shape == (5, 10)
    with pytest.raises(tc.ShapeError, match=r"tokens: expected shape \(B, N, 16\)"):
        model(torch.zeros(5, 8, 12))


def test_train_rows_is_repeatable_and_learns(digits):
    config = tc.BlockConfig(d_model=16, n_heads=2)
    first, history = train_rows(digits, config, n_blocks=2, lr=3e-3, steps=60, seed=1)
    again, _ = train_rows(digits, config, n_blocks=2, lr=3e-3, steps=60, seed=1)
    other, _ = train_rows(digits, config, n_blocks=2, lr=3e-3, steps=60, seed=2)
    for a, b in zip(first.parameters(), again.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert any(
        not torch.equal(a, b)
        for a, b in zip(first.parameters(), other.parameters(), strict=True)
    )
    assert history.val_steps == [24, 49, 59]
    assert history.val_losses[-1] < history.val_losses[0]
    assert row_accuracy(first, digits) > 0.3  # far above a tenth after 60 steps


class _History:
    def __init__(self, steps, losses):
        self.val_steps, self.val_losses = steps, losses


def test_rise_after_measures_the_climb_after_a_step():
    history = _History([24, 49, 74, 99], [1.0, 0.5, 0.9, 0.4])
    assert rise_after(history, 49) == pytest.approx(0.4)
    assert rise_after(history, 74) == 0.0  # it only falls afterwards
    assert rise_after(_History([24, 49], [1.0, 0.5]), 49) == 0.0  # nothing later
    with pytest.raises(ValueError, match=r"measured \(\[24, 49, 74, 99\]\), got 50"):
        rise_after(history, 50)


def test_lag_batches_target_the_token_three_places_back():
    ids, targets = lag_batch("train", 7, length=20, batch_size=5)
    assert ids.shape == targets.shape == (5, 20)
    assert torch.equal(targets[:, LAG:], ids[:, :-LAG])
    assert (targets[:, :LAG] == -100).all()
    again, _ = lag_batch("train", 7, length=20, batch_size=5)
    held_out, _ = lag_batch("val", 7, length=20, batch_size=5)
    assert torch.equal(ids, again)
    assert not torch.equal(ids, held_out)
    with pytest.raises(ValueError, match="length"):
        lag_batch("train", 0, length=LAG)


@pytest.mark.parametrize("encoding", ENCODINGS)
def test_the_token_model_takes_every_encoding(encoding):
    torch.manual_seed(0)
    model = TokenModel(16, 16, encoding, D=16, H=2, M=1, max_len=32)
    ids, targets = lag_batch("train", 0, length=12, batch_size=3)
    assert model(ids).shape == (3, 12, 16)
    scores = model(ids)
    expected = torch.nn.functional.cross_entropy(
        scores[:, LAG:].flatten(0, 1), targets[:, LAG:].flatten()
    )
    torch.testing.assert_close(lag_loss(model, (ids, targets)), expected)
    assert lag_accuracy(model, 20).shape == (20 - LAG,)


def test_the_token_model_names_what_it_was_given():
    with pytest.raises(ValueError, match="positions"):
        TokenModel(16, 16, "absolute")
    model = TokenModel(16, 16, "none", D=16, H=2, M=1)
    with pytest.raises(tc.ShapeError):
        model(torch.zeros(2, 3, 4, dtype=torch.long))
    with pytest.raises(ValueError, match="16"):
        model(torch.full((2, 5), 16))  # ids must be below the vocabulary's size


def test_a_causal_model_without_positions_is_blind_to_order_only_within_the_mask():
    """Without positions and without the mask, permuting the tokens permutes
    the outputs (chapter 5's starting point); the causal mask breaks that."""
    torch.manual_seed(0)
    ids = torch.randint(0, 16, (1, 10))
    order = torch.randperm(10)
    free = TokenModel(16, 16, "none", causal=False, D=16, H=2, M=1).eval()
    with torch.no_grad():
        torch.testing.assert_close(free(ids[:, order]), free(ids)[:, order])
        masked = TokenModel(16, 16, "none", causal=True, D=16, H=2, M=1).eval()
        assert not torch.allclose(masked(ids[:, order]), masked(ids)[:, order])


def test_train_lag_is_repeatable():
    first = train_lag("rope", steps=25, seed=3)
    again = train_lag("rope", steps=25, seed=3)
    for a, b in zip(first.parameters(), again.parameters(), strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
