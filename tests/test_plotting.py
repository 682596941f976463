import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

import transformer_course as tc


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def test_labels_titles_and_annotations():
    weights = torch.softmax(torch.randn(3, 3), dim=-1)
    ax = tc.attention_heatmap(weights, ["a", "b", "c"], title="demo")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b", "c"]
    assert ax.get_title() == "demo"
    assert ax.get_xlabel() == "key (attended to)"
    assert ax.get_ylabel() == "query (attending)"
    assert len(ax.texts) == 9  # one annotation per cell
    np.testing.assert_allclose(ax.images[0].get_array(), weights.numpy())


def test_rectangular_and_numpy_input():
    ax = tc.attention_heatmap(
        np.full((2, 4), 0.25), ["q1", "q2"], list("wxyz"), annotate=False
    )
    assert [t.get_text() for t in ax.get_xticklabels()] == list("wxyz")
    assert len(ax.texts) == 0


def test_large_matrices_are_not_annotated_by_default():
    ax = tc.attention_heatmap(torch.full((20, 20), 0.05))
    assert len(ax.texts) == 0
    assert ax.get_yticklabels()[3].get_text() == "3"


def test_bad_inputs_name_the_shapes():
    with pytest.raises(
        ValueError, match=r"expected a 2-D attention matrix .* got shape \(2, 3, 3\)"
    ):
        tc.attention_heatmap(torch.zeros(2, 3, 3))
    with pytest.raises(ValueError, match=r"query_labels: expected 3 labels .* got 2"):
        tc.attention_heatmap(torch.zeros(3, 3), ["a", "b"])
    with pytest.raises(ValueError, match=r"key_labels: expected 4 labels .* got 3"):
        tc.attention_heatmap(torch.zeros(2, 4), ["a", "b"], ["x", "y", "z"])
