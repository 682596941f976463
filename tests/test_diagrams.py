"""transformer_course.diagrams (chapters 2 and 3): each figure draws its labelled shapes."""

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pytest
from matplotlib.figure import Figure

from transformer_course import diagrams


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def drawn(fig):
    """The figure's texts, drawn once so that layout errors surface here."""
    assert isinstance(fig, Figure)
    fig.canvas.draw()
    return diagrams.figure_text(fig)


def inside_the_figure(fig):
    """Every text lies within the figure's canvas (nothing clipped at an edge)."""
    renderer = fig.canvas.get_renderer()
    width, height = fig.canvas.get_width_height()
    for ax in fig.axes:
        for text in [ax.title, *ax.texts]:
            box = text.get_window_extent(renderer)
            assert min(box.x0, box.y0) >= -1, text.get_text()
            assert box.x1 <= width + 1, text.get_text()
            assert box.y1 <= height + 1, text.get_text()


@pytest.mark.parametrize(
    ("make", "labels"),
    [
        (diagrams.attention_as_average, ["Y", "X", "A", "D × N", "N × N"]),
        (
            diagrams.qkv_graph,
            [
                "x",
                "(N, D)",
                "$W_q$",
                "$W_k$",
                "$W_v$",
                "(D, $d_k$)",
                "(D, $d_v$)",
                "$q$",
                "$k$",
                "$v$",
                "(N, $d_k$)",
                "(N, $d_v$)",
                "scores (N, N)",
                "+ mask",
                "softmax",
                "output (N, $d_v$)",
            ],
        ),
        (
            diagrams.multihead_as_sum,
            [
                "Y",
                "X",
                "$W_{OV}^h$",
                "$A_h$",
                "D × N",
                "D × D, one per head",
                "N × N, one per head",
            ],
        ),
        (
            diagrams.split_merge_heads,
            [
                "(B, N, D)",
                "(B, N, H, d)",
                "(B, H, N, d)",
                "split_heads",
                "merge_heads",
                ".view(B, N, H, d)",
                ".transpose(1, 2)",
                ".reshape(B, N, D)",
                "head 0",
                "head 2",
            ],
        ),
        (
            diagrams.block_diagram,
            [
                "pre-norm (Turner fig. 7)",
                "post-norm (original)",
                "MHSA",
                "MLP",
                "LayerNorm",
                "+",
                "$x^{(m-1)}$  (N, D)",
                "$x^{(m)}$  (N, D)",
            ],
        ),
    ],
    ids=lambda x: getattr(x, "__name__", ""),
)
def test_each_figure_names_its_shapes(make, labels):
    fig = make()
    texts = drawn(fig)
    for label in labels:
        assert label in texts, label
    assert fig.axes[0].get_title()  # every figure has a title
    inside_the_figure(fig)


def test_the_weighted_average_figure_states_the_sum():
    texts = drawn(diagrams.attention_as_average(j=2, n=5))
    assert "j" in texts  # the highlighted row ...
    assert "n" in texts  # ... and column are named
    assert r"\sum_{n'}" in " ".join(texts)


def test_the_sum_over_heads_notes_turners_name():
    texts = " ".join(drawn(diagrams.multihead_as_sum()))
    assert "Turner's $V_h$" in texts
    assert "rank ≤ d = D/H" in texts


@pytest.mark.parametrize("n_heads", [1, 2, 4, 6])
def test_split_merge_draws_one_grid_per_head(n_heads):
    texts = drawn(diagrams.split_merge_heads(n_heads=n_heads))
    assert [t for t in texts if t.startswith("head ")] == [
        f"head {h}" for h in range(n_heads)
    ]


def test_multihead_stacks_one_matrix_per_head():
    one, four = diagrams.multihead_as_sum(1), diagrams.multihead_as_sum(4)
    # Y (4×5) and X (4×5) plus H copies of W_OV^h (4×4) and A_h (5×5)
    assert len(one.axes[0].patches) == 20 + 20 + 16 + 25
    assert len(four.axes[0].patches) == 20 + 20 + 4 * (16 + 25)


@pytest.mark.parametrize(
    ("make", "kwargs", "message"),
    [
        (diagrams.attention_as_average, {"j": 4}, "0 ≤ j < 4"),
        (diagrams.multihead_as_sum, {"n_heads": 7}, "n_heads: expected 1 to 6"),
        (diagrams.split_merge_heads, {"n_heads": 0}, "1 ≤ n_heads ≤ 6"),
    ],
)
def test_sizes_that_do_not_fit_are_refused(make, kwargs, message):
    with pytest.raises(ValueError, match=message):
        make(**kwargs)


def test_the_block_diagram_draws_two_blocks_with_two_residual_sums_each():
    texts = drawn(diagrams.block_diagram())
    assert texts.count("+") == 4  # two residual sums per block
    assert texts.count("LayerNorm") == 4
    assert texts.count("after the sum") == 2  # post-norm's norms follow the sums


def test_split_merge_ends_with_the_output_projection():
    """Eq. (3.1) ends with · W_O after the merge: the diagram says so."""
    texts = " ".join(drawn(diagrams.split_merge_heads()))
    assert "W_O" in texts
    assert "out_proj" in texts
