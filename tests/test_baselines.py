"""transformer_course.baselines (chapter 7): kNN, SVM and a small CNN on the digits."""

import pytest
import torch
from torch import nn

import transformer_course as tc
from transformer_course import baselines


@pytest.fixture(scope="module")
def tuned():
    """The digits and both baselines tuned on them (a few seconds: computed once)."""
    digits = tc.load_digits()
    return digits, tc.knn_and_svm(digits)


def test_knn_and_svm_are_tuned_on_train_and_scored_on_test(tuned):
    digits, results = tuned
    assert set(results) == {"kNN", "SVM"}
    for accuracy, _ in results.values():
        assert 0.95 < accuracy <= 1.0  # both are strong on the digits
        right = accuracy * len(digits.y_test)  # a share of the 360 test images
        assert abs(right - round(right)) < 1e-9
    knn, svm = results["kNN"][1], results["SVM"][1]
    assert knn["n_neighbors"] in baselines.KNN_GRID["n_neighbors"]
    assert svm["C"] in baselines.SVM_GRID["C"]


def test_the_search_never_sees_the_test_images(tuned):
    """Scramble the test labels: the chosen hyperparameters cannot change."""
    digits, results = tuned
    chosen = {name: params for name, (_, params) in results.items()}
    g = torch.Generator().manual_seed(0)
    scrambled = digits._replace(y_test=digits.y_test[torch.randperm(360, generator=g)])
    again = {name: params for name, (_, params) in tc.knn_and_svm(scrambled).items()}
    assert again == chosen


def test_small_cnn_shapes_parameters_and_errors():
    cnn = tc.SmallCNN()
    assert cnn(torch.zeros(5, 1, 8, 8)).shape == (5, 10)
    convs = [m for m in cnn.modules() if isinstance(m, nn.Conv2d)]
    assert [c.kernel_size for c in convs] == [(3, 3), (3, 3)]
    assert sum(p.numel() for p in cnn.parameters()) == (
        (1 * 9 + 1) * 16 + (16 * 9 + 1) * 32 + (32 * 16 + 1) * 10
    )
    with pytest.raises(tc.ShapeError, match=r"got \(5, 8, 8\)"):
        cnn(torch.zeros(5, 8, 8))


def test_a_convolution_is_translation_equivariant_before_the_pooling():
    """The inductive bias the ViT lacks: shifting the input shifts the features."""
    torch.manual_seed(0)
    cnn = tc.SmallCNN().eval()
    x = torch.zeros(1, 1, 8, 8)
    x[0, 0, 2:4, 2:5] = 1  # a small blob well inside the image
    shifted = torch.roll(x, shifts=(1, 1), dims=(2, 3))
    conv = cnn.features[:4]  # both convolutions, before the pooling
    # away from the borders, where the zero padding differs from a constant
    # first-layer activation: rows and columns 2 ... 6 of the shifted output
    with torch.no_grad():
        a, b = conv(x), conv(shifted)
    torch.testing.assert_close(
        torch.roll(a, shifts=(1, 1), dims=(2, 3))[..., 2:-1, 2:-1], b[..., 2:-1, 2:-1]
    )


def test_the_cnn_trains_with_the_course_loop():
    digits = tc.load_digits()
    run = tc.train_vit.DigitsRun(
        model={},
        train={
            "steps": 150,
            "batch_size": 64,
            "lr": 3e-3,
            "warmup_steps": 10,
            "eval_every": 75,
            "eval_batches": 1,
        },
    )
    torch.manual_seed(0)
    cnn = tc.SmallCNN()
    history = tc.train_vit.fit_on_digits(cnn, digits, run)
    assert not cnn.training
    with torch.no_grad():
        accuracy = (cnn(digits.x_test).argmax(-1) == digits.y_test).float().mean()
    assert history.val_losses[-1] < history.val_losses[0]
    assert accuracy > 0.8


@pytest.mark.parametrize("name", baselines.__all__)
def test_every_public_object_names_its_chapter(name):
    assert "Chapter 7" in getattr(baselines, name).__doc__
