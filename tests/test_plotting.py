import re

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import pytest
import torch

import transformer_course as tc
from transformer_course import plotting


@pytest.fixture(autouse=True)
def course_style_then_clean_up():
    """Each test draws in the course style, then restores matplotlib's settings."""
    with mpl.rc_context():
        tc.use_course_style()
        yield
    plt.close("all")


def tick_values(axis):
    return [float(t) for t in axis.get_majorticklocs()]


def visible_ticks(ax, which):
    """The tick positions inside the axes' view, as floats."""
    low, high = sorted(ax.get_xlim() if which == "x" else ax.get_ylim())
    axis = ax.xaxis if which == "x" else ax.yaxis
    return [t for t in tick_values(axis) if low <= t <= high]


# -- style ------------------------------------------------------------------------


def test_course_style_sizes_read_in_the_content_column():
    style = plotting.COURSE_STYLE
    width, height = style["figure.figsize"]
    assert 700 <= width * style["figure.dpi"] <= 800  # px: the book's content column
    assert height < width
    assert style["font.size"] >= 10
    for key in ("xtick.labelsize", "ytick.labelsize", "legend.fontsize"):
        assert style[key] >= 9, key  # tick labels of multi-panel figures too
    assert style["figure.constrained_layout.use"] is True


def test_use_course_style_sets_rcparams():
    mpl.rcdefaults()
    tc.use_course_style()
    for key, value in plotting.COURSE_STYLE.items():
        assert mpl.rcParams[key] == mpl.rcParams.validate[key](value), key
    fig, _ = plt.subplots()
    assert fig.get_layout_engine().__class__.__name__ == "ConstrainedLayoutEngine"
    np.testing.assert_allclose(fig.get_size_inches(), (7.0, 4.0))


# -- token axes -------------------------------------------------------------------


@pytest.mark.parametrize("n_tokens", [3, 4, 7, 16, 22, 100])
@pytest.mark.parametrize("which", ["x", "y"])
def test_token_axis_ticks_are_integers(n_tokens, which):
    fig, ax = plt.subplots()
    matrix = np.random.default_rng(0).random((n_tokens, n_tokens))
    ax.imshow(matrix, aspect="auto")
    tc.token_axis(ax, axis=which)
    fig.canvas.draw()
    ticks = visible_ticks(ax, which)
    assert len(ticks) >= 2
    assert all(t == int(t) for t in ticks), ticks
    label = ax.get_xlabel() if which == "x" else ax.get_ylabel()
    assert label == "token n"


def test_without_token_axis_a_narrow_matrix_gets_fractional_ticks():
    """Why the helper exists: matplotlib's default ticks a 4-wide image at halves."""
    fig, ax = plt.subplots()
    ax.imshow(np.zeros((16, 4)), aspect="auto")
    fig.canvas.draw()
    assert any(t != int(t) for t in visible_ticks(ax, "x"))
    tc.token_axis(ax, label="pixel")
    fig.canvas.draw()
    assert visible_ticks(ax, "x") == [0.0, 1.0, 2.0, 3.0]
    assert ax.get_xlabel() == "pixel"


def test_token_axis_with_labels_puts_one_label_per_token():
    _, ax = plt.subplots()
    ax.imshow(np.zeros((3, 5)))
    tc.token_axis(ax, ["To", " be", ",", " or", " not"], rotation=90)
    assert tick_values(ax.xaxis) == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "To",
        " be",
        ",",
        " or",
        " not",
    ]
    assert ax.get_xticklabels()[0].get_rotation() == 90
    tc.token_axis(ax, range(3), axis="y", label=None)
    assert [t.get_text() for t in ax.get_yticklabels()] == ["0", "1", "2"]
    assert ax.get_ylabel() == ""


def test_token_axis_rejects_a_bad_axis():
    _, ax = plt.subplots()
    with pytest.raises(ValueError, match="axis: expected 'x' or 'y', got 'z'"):
        tc.token_axis(ax, axis="z")


# -- patches ----------------------------------------------------------------------


@pytest.mark.parametrize(("size", "p"), [(8, 2), (8, 4), (12, 3)])
def test_patch_tokens_figure_shows_the_patchify_matrix(size, p):
    image = torch.rand(1, size, size)
    fig = tc.patch_tokens_figure(image, p, highlight=1, title="demo")
    ax_image, ax_patch, ax_tokens = fig.axes
    n_tokens = (size // p) ** 2
    expected = tc.patchify(image[None], p)[0]  # (N, p·p)
    np.testing.assert_allclose(ax_tokens.images[0].get_array(), expected.numpy())
    np.testing.assert_allclose(ax_image.images[0].get_array(), image[0].numpy())
    np.testing.assert_allclose(
        ax_patch.images[0].get_array(), expected[1].reshape(p, p).numpy()
    )
    assert fig.get_suptitle() == "demo"
    for ax in fig.axes:
        assert ax.get_title()
        assert ax.get_xlabel()
        assert ax.get_ylabel()
    fig.canvas.draw()
    for ax in fig.axes:
        for which in ("x", "y"):
            assert all(t == int(t) for t in visible_ticks(ax, which))
    assert ax_tokens.get_ylabel() == "token n"
    assert ax_tokens.get_title() == f"tokens ({n_tokens}, {p * p})"
    # the patch numbers drawn on the image: one per token
    assert sorted(int(t.get_text()) for t in ax_image.texts) == list(range(n_tokens))
    # the highlighted patch's outline is drawn on top of the patch numbers
    (outline,) = ax_image.patches
    assert outline.get_zorder() > max(t.get_zorder() for t in ax_image.texts)
    assert outline.get_linewidth() >= 3


def test_patch_tokens_figure_follows_the_inkiest_patch_by_default():
    image = torch.zeros(8, 8)
    image[4:6, 2:4] = 1.0  # patch 9 of a 4×4 grid of 2×2 patches
    fig = tc.patch_tokens_figure(image, 2)
    assert fig.axes[1].get_title() == "patch 9: vec order"


def test_patch_tokens_figure_bad_inputs():
    with pytest.raises(ValueError, match=r"one grey image .* got shape \(3, 8, 8\)"):
        tc.patch_tokens_figure(torch.zeros(3, 8, 8), 2)
    with pytest.raises(ValueError, match=r"highlight: expected a token in 0..15"):
        tc.patch_tokens_figure(torch.zeros(8, 8), 2, highlight=16)


# -- attention heatmaps -----------------------------------------------------------


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


@pytest.mark.parametrize("layout", ["constrained", "tight"])
def test_heatmap_colorbar_works_with_either_layout(layout):
    """The colour bar is an inset of its axes, so switching a constrained figure
    to tight_layout (as older chapter cells do) is not an error."""
    fig, axes = plt.subplots(1, 2)
    for ax in axes:
        tc.attention_heatmap(torch.full((3, 3), 1 / 3), ax=ax)
    assert len(axes[0].child_axes) == 1  # the colour bar
    if layout == "tight":
        with pytest.warns(UserWarning, match="layout has changed to tight"):
            fig.tight_layout()
    fig.canvas.draw()


def test_loss_curves_draw_runs_and_reference_lines():
    from transformer_course.train import History

    history = History(
        steps=list(range(10)),
        train_losses=[3.0 - 0.1 * s for s in range(10)],
        val_steps=[4, 9],
        val_losses=[2.7, 2.2],
    )
    ax = tc.plotting.loss_curves(
        {"pre-norm": history}, references={"uniform ln V": 4.17}, smooth=3
    )
    lines = {line.get_label(): line for line in ax.get_lines()}
    train = lines["pre-norm: train"]
    assert list(train.get_xdata()) == list(range(2, 10))  # a 3-step average
    assert train.get_ydata()[0] == pytest.approx(2.9)
    assert list(lines["pre-norm: validation"].get_ydata()) == [2.7, 2.2]
    # after steps 4 and 9: 5 and 10 updates made (the training loss of step s is
    # taken before its update, at s)
    assert list(lines["pre-norm: validation"].get_xdata()) == [5, 10]
    # two evaluations far apart are points, not a line that looks measured
    assert lines["pre-norm: validation"].get_linewidth() == 0
    assert lines["pre-norm: validation"].get_marker() == "o"
    assert list(lines["uniform ln V: 4.17"].get_ydata()) == [4.17, 4.17]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == [
        "pre-norm: train",
        "pre-norm: validation",
        "uniform ln V: 4.17",
    ]
    assert ax.get_xlabel() == "step"
    assert ax.get_ylabel() == "cross-entropy (nats)"
    assert ax.get_title()
    ax = tc.plotting.loss_curves({"ViT": history}, held_out="test")
    assert [line.get_label() for line in ax.get_lines()] == ["ViT: train", "ViT: test"]
    # more evaluations: joined by a dotted line, nothing measured between them
    history.val_steps, history.val_losses = [1, 4, 9], [2.9, 2.7, 2.2]
    ax = tc.plotting.loss_curves({"pre-norm": history})
    (validation,) = [
        li for li in ax.get_lines() if li.get_label().endswith("validation")
    ]
    assert validation.get_linestyle() == ":"
    assert validation.get_linewidth() > 0


def test_loss_curves_name_bad_input():
    from transformer_course.train import History

    with pytest.raises(ValueError, match="expected at least one run"):
        tc.plotting.loss_curves({})
    bad = History(steps=[0, 1], train_losses=[1.0])
    with pytest.raises(ValueError, match="expected as many steps as training losses"):
        tc.plotting.loss_curves({"run": bad})
    with pytest.raises(ValueError, match=r"smooth: expected an int >= 1, got 0"):
        tc.plotting.loss_curves({"run": History()}, smooth=0)


def test_confusion_matrix_counts_true_against_predicted():
    labels = torch.tensor([0, 0, 1, 2, 2, 2])
    predicted = torch.tensor([0, 1, 1, 2, 0, 2])
    counts = plotting.confusion_matrix(labels, predicted, 3)
    assert torch.equal(counts, torch.tensor([[1, 1, 0], [0, 1, 0], [1, 0, 2]]))
    assert counts.sum() == 6
    assert counts.trace() == 4  # the right answers
    texts = [t.get_text() for t in plt.gca().texts]
    assert sorted(texts) == ["1", "1", "1", "1", "2"]  # every nonzero count written
    plt.close("all")
    with pytest.raises(ValueError, match=r"expected two tensors of shape \(B,\)"):
        plotting.confusion_matrix(labels, predicted[:3], 3)


def test_image_grid_draws_every_image_with_its_title():
    images = torch.rand(10, 1, 8, 8)
    fig = plotting.image_grid(images, [f"#{i}" for i in range(10)], columns=4)
    drawn = [ax for ax in fig.axes if ax.images]
    assert len(drawn) == 10
    assert len(fig.axes) == 12  # 3 rows of 4, the last two empty
    assert [ax.get_title() for ax in drawn] == [f"#{i}" for i in range(10)]
    np.testing.assert_array_equal(drawn[3].images[0].get_array(), images[3, 0].numpy())
    plt.close(fig)
    with pytest.raises(ValueError, match="titles: expected 10"):
        plotting.image_grid(images, ["a"])
    with pytest.raises(ValueError, match=r"got shape \(8, 8\)"):
        plotting.image_grid(torch.rand(8, 8))


def test_loss_curves_of_several_runs_keep_the_legend_off_the_curves():
    """Four runs and a reference: 5 entries (one per run, two line styles, the
    reference), not 9, and placed beside the axes (issue 22: a nine-entry
    legend covered chapter 4's warm-up curves)."""
    from transformer_course.train import History

    history = History(
        steps=list(range(10)),
        train_losses=[3.0 - 0.1 * s for s in range(10)],
        val_steps=[4, 9],
        val_losses=[2.7, 2.2],
    )
    runs = {f"run {i}": history for i in range(4)}
    ax = tc.plotting.loss_curves(runs, references={"uniform": 2.3})
    legend = ax.get_legend()
    assert [t.get_text() for t in legend.get_texts()] == [
        "run 0",
        "run 1",
        "run 2",
        "run 3",
        "train (thin line)",
        "validation",
        "uniform: 2.30",
    ]
    ax.figure.canvas.draw()
    box = legend.get_window_extent()
    assert box.x0 >= ax.get_window_extent().x1  # beside the axes, not over them
    plt.close("all")


def test_show_figure_gives_the_image_its_alt_text(monkeypatch):
    import base64
    import html
    import io

    import IPython.display
    from PIL import Image

    shown = []
    monkeypatch.setattr(IPython.display, "display", shown.append)
    fig, ax = plt.subplots(figsize=(4.0, 2.0), dpi=100)
    ax.plot([0, 1], [1, 0])
    plotting.show_figure(fig, 'A falling line, from "one" to zero.')
    assert not plt.fignum_exists(fig.number)  # closed: not shown a second time
    [output] = shown
    tag = output.data
    assert 'alt="A falling line, from &quot;one&quot; to zero."' in tag
    assert 'width="400"' in tag  # the figure's size in CSS pixels
    data = re.search(r'src="data:image/png;base64,([^"]+)"', tag).group(1)
    image = Image.open(io.BytesIO(base64.b64decode(data)))
    assert image.size == (800, 400)  # twice its pixels, as "retina" figures
    assert html.unescape(re.search(r'alt="([^"]*)"', tag).group(1)).endswith("zero.")
    with pytest.raises(ValueError, match="a sentence that describes the figure"):
        plotting.show_figure(plt.figure(), "a line")
