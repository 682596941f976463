"""transformer_course.word_vectors (chapter 1)."""

import math

import pytest
import torch
import torch.nn.functional as F

import transformer_course as tc


def brute_force_counts(ids, vocab_size, window):
    counts = torch.zeros(vocab_size, vocab_size, dtype=torch.float64)
    for i, a in enumerate(ids):
        for j, b in enumerate(ids):
            if i != j and abs(i - j) <= window:
                counts[a, b] += 1
    return counts


@pytest.mark.parametrize("window", [1, 2, 3])
def test_cooccurrence_matches_a_double_loop(window):
    ids = torch.randint(0, 6, (40,), generator=torch.Generator().manual_seed(window))
    expected = brute_force_counts(ids.tolist(), 6, window)
    torch.testing.assert_close(tc.cooccurrence(ids, 6, window), expected)


def test_ppmi_matches_its_formula():
    counts = torch.tensor([[0.0, 4, 1], [4, 2, 0], [1, 0, 6]], dtype=torch.float64)
    total = counts.sum()
    expected = torch.zeros(3, 3, dtype=torch.float64)
    for a in range(3):
        for b in range(3):
            if counts[a, b] > 0:
                pmi = math.log(
                    (counts[a, b] / total)
                    / ((counts[a].sum() / total) * (counts[:, b].sum() / total))
                )
                expected[a, b] = max(pmi, 0.0)
    torch.testing.assert_close(tc.ppmi(counts), expected)


def test_svd_vectors_reconstruct_a_psd_matrix_and_are_deterministic():
    base = torch.randn(
        6, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)
    )
    matrix = base @ base.T  # symmetric, rank 3
    vectors = tc.svd_vectors(matrix, 3)  # (6, 3)
    torch.testing.assert_close(vectors @ vectors.T, matrix)
    torch.testing.assert_close(tc.svd_vectors(matrix, 3), vectors)
    with pytest.raises(ValueError, match=r"dim: expected an int in 1..6, got 7"):
        tc.svd_vectors(matrix, 7)


def test_cosine_matrix_matches_torch_values_and_gradients():
    x = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    ours = tc.cosine_similarity_matrix(x)
    reference = F.cosine_similarity(x[:, None, :], x[None, :, :], dim=-1)
    torch.testing.assert_close(ours, reference)
    upstream = torch.randn_like(ours)
    torch.testing.assert_close(
        torch.autograd.grad(ours, x, upstream)[0],
        torch.autograd.grad(reference, x, upstream)[0],
    )


def test_nearest_orders_by_cosine_and_skips_itself():
    vectors = torch.tensor([[1.0, 0], [0.9, 0.1], [0, 1], [-1, 0], [0.5, 0.5]])
    assert tc.nearest(vectors, 0, k=3) == [1, 4, 2]


def test_words_in_similar_contexts_get_similar_vectors():
    # "cat" and "dog" share every context; "red" and "blue" share theirs
    text = " ".join(
        [
            "the cat runs fast",
            "the dog runs fast",
            "a red car stops",
            "a blue car stops",
        ]
        * 20
    )
    tok = tc.WordTokenizer(text)
    counts = tc.cooccurrence(torch.tensor(tok.encode(text)), tok.vocab_size, window=1)
    vectors = tc.svd_vectors(tc.ppmi(counts), 4)
    sims = tc.cosine_similarity_matrix(vectors)
    cat, dog, red, blue = (tok.ids[w] for w in ("cat", "dog", "red", "blue"))
    assert sims[cat, dog] > 0.9
    assert sims[red, blue] > 0.9
    assert sims[cat, red] < 0.5


def test_fit_word_vectors_is_the_recipe_in_one_call():
    text = " ".join(
        [
            "the cat runs fast",
            "the dog runs fast",
            "a red car stops",
            "a blue car stops",
        ]
        * 20
    )
    vocab, vectors = tc.fit_word_vectors(text, vocab_size=50, window=1, dim=4)
    assert vectors.shape == (vocab.vocab_size, 4)
    assert torch.all(vectors[0] == 0)  # <unk> has no contexts
    sims = tc.cosine_similarity_matrix(vectors[1:])
    cat, dog = vocab.ids["cat"] - 1, vocab.ids["dog"] - 1
    assert sims[cat, dog] > 0.9
    again = tc.fit_word_vectors(text, vocab_size=50, window=1, dim=4)[1]
    torch.testing.assert_close(again, vectors)


VECTORS = torch.tensor([[1.0, 0], [0.9, 0.1], [0, 1], [-1, 0], [0.5, 0.5]])  # (5, 2)


@pytest.mark.parametrize(
    ("k", "index", "error", "message"),
    [
        (5, 0, ValueError, r"k: expected an int in 1..4 \(the other rows of vectors "),
        (9, 0, ValueError, r"in 1..4 \(the other rows of vectors \(5, 2\)\), got 9"),
        (0, 0, ValueError, r"k: expected an int in 1..4 .*, got 0"),
        (2, 5, ValueError, r"index: expected an int in 0..4 \(a row of vectors "),
        (2, -1, ValueError, r"index: expected an int in 0..4 .*\(5, 2\)\), got -1"),
        (2.0, 0, TypeError, r"k: expected an int, got 2.0"),
    ],
)
def test_nearest_rejects_k_and_index_out_of_range(k, index, error, message):
    with pytest.raises(error, match=message):
        tc.nearest(VECTORS, index, k=k)


def test_nearest_needs_two_rows_and_a_tensor():
    with pytest.raises(ValueError, match=r"at least 2 rows .*, got \(1, 2\)"):
        tc.nearest(VECTORS[:1], 0, k=1)
    with pytest.raises(TypeError, match=r"vectors: expected a torch.Tensor .*got list"):
        tc.nearest(VECTORS.tolist(), 0, k=1)


@pytest.mark.parametrize(
    ("ids", "kwargs", "error", "message"),
    [
        (
            torch.tensor([0, 2, -1, 3]),
            {},
            ValueError,
            r"ids: expected token ids in 0\.\.5, got values from -1 to 3",
        ),
        (
            torch.tensor([0, 6, 2]),
            {},
            ValueError,
            r"ids: expected token ids in 0\.\.5, got values from 0 to 6",
        ),
        (
            torch.tensor([0.0, 1.0]),
            {},
            TypeError,
            r"ids: expected integer token ids, got dtype torch.float32",
        ),
        (
            [0, 1, 2],
            {},
            TypeError,
            r"ids: expected a torch.Tensor of shape \(N\), got list",
        ),
        (
            torch.tensor([[0, 1], [2, 3]]),
            {},
            tc.ShapeError,
            r"ids: expected shape \(N\), got \(2, 2\)",
        ),
        (torch.tensor([0, 1]), {"window": 0}, ValueError, r"window: .* ≥ 1, got 0"),
        (torch.tensor([0, 1]), {"vocab_size": 0}, ValueError, r"vocab_size: .*got 0"),
    ],
    ids=["negative", "too-large", "float", "list", "2-D", "window", "vocab_size"],
)
def test_cooccurrence_rejects_bad_ids(ids, kwargs, error, message):
    with pytest.raises(error, match=message):
        tc.cooccurrence(ids, **{"vocab_size": 6, **kwargs})


def test_cooccurrence_takes_any_integer_dtype():
    ids = torch.tensor([0, 1, 2, 1, 0])
    expected = tc.cooccurrence(ids, 3)
    for dtype in (torch.int32, torch.uint8):
        torch.testing.assert_close(tc.cooccurrence(ids.to(dtype), 3), expected)
