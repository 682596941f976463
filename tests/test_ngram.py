"""transformer_course.ngram (chapter 6): the count-based baselines a GPT must beat.

The smoothed probabilities are compared with a plain-Python reference written
from the formulas (dictionaries, one context at a time), the vectorised counts
with the definitions, and the baselines on tiny Shakespeare with their order.
"""

import itertools
import math
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch

import transformer_course as tc
from transformer_course.data import split_ids
from transformer_course.ngram import NGramModel, ngram_table, select_order


def markov_text(length=600, vocab_size=5, seed=0):
    """Ids with structure: each token mostly follows from the one before."""
    rng = np.random.default_rng(seed)
    transition = rng.dirichlet(np.full(vocab_size, 0.3), size=vocab_size)  # (V, V)
    ids = [0]
    for _ in range(length - 1):
        ids.append(int(rng.choice(vocab_size, p=transition[ids[-1]])))
    return ids


def discounts(counts):
    """Chen & Goodman's D₁, D₂, D₃₊ with the module's fallbacks for tiny texts."""
    n = [sum(1 for c in counts if c == k) for k in (1, 2, 3, 4)]
    if n[0] == 0 or n[0] + 2 * n[1] == 0:
        return (0.5, 0.5, 0.5)
    y = n[0] / (n[0] + 2 * n[1])
    if min(n) == 0:
        return (y, y, y)
    return tuple(min(max(k - (k + 1) * y * n[k] / n[k - 1], 0.0), k) for k in (1, 2, 3))


def kneser_ney_reference(ids, order, vocab_size):
    """p(w | context) by interpolated modified Kneser–Ney, one dict per order."""
    grams = {  # raw counts of the complete k-grams of the text
        k: Counter(tuple(ids[t - k + 1 : t + 1]) for t in range(k - 1, len(ids)))
        for k in range(1, order + 1)
    }
    counts = {order: grams[order]}
    for k in range(1, order):  # continuation counts: distinct tokens before g
        counts[k] = Counter(gram[1:] for gram in grams[k + 1])
    d = {k: discounts(list(counts[k].values())) for k in counts}

    def discount(k, c):
        return 0.0 if c == 0 else d[k][min(c, 3) - 1]

    totals, gammas = defaultdict(dict), defaultdict(dict)
    for k, table in counts.items():
        for gram, c in table.items():
            h = gram[:-1]
            totals[k][h] = totals[k].get(h, 0) + c
            gammas[k][h] = gammas[k].get(h, 0.0) + discount(k, c)

    def p(w, context):
        p_lower = 1.0 / vocab_size
        for k in range(1, order + 1):
            if len(context) < k - 1:
                break
            h = tuple(context[len(context) - (k - 1) :]) if k > 1 else ()
            total = totals[k].get(h, 0)
            if total == 0:  # an unseen context: the shorter one's estimate
                continue
            c = counts[k].get((*h, w), 0)
            p_lower = (max(c - discount(k, c), 0.0) + gammas[k][h] * p_lower) / total
        return p_lower

    return p


@pytest.mark.parametrize("order", [1, 2, 3])
def test_kneser_ney_equals_the_formulas(order):
    ids, V = markov_text(), 5
    model = NGramModel(order, V).fit(ids)
    reference = kneser_ney_reference(ids, order, V)
    contexts = [(), (3,), (1, 4), (0, 2), (2, 2, 2)]
    for context in contexts:
        want = np.array([reference(w, context) for w in range(V)])
        np.testing.assert_allclose(model.probabilities(context), want, rtol=1e-12)
        assert want.sum() == pytest.approx(1.0)
    # the cross-entropy is the mean of −ln p over the text, the first tokens
    # predicted from the shorter contexts they have
    text = markov_text(80, seed=1)
    want = -np.mean(
        [
            math.log(reference(w, text[max(0, t - order + 1) : t]))
            for t, w in enumerate(text)
        ]
    )
    assert model.cross_entropy(text) == pytest.approx(want, rel=1e-12)


def test_additive_smoothing_equals_its_formula_and_tends_to_the_counts():
    ids, V = markov_text(), 5
    pairs = Counter(itertools.pairwise(ids))
    starts = Counter(ids[:-1])
    model = NGramModel(2, V, "additive", alpha=0.5).fit(ids)
    for h in range(V):
        want = [(pairs[(h, w)] + 0.5) / (starts[h] + 0.5 * V) for w in range(V)]
        np.testing.assert_allclose(model.probabilities([h]), want, rtol=1e-12)
    # α → 0: the maximum-likelihood estimate c(h w) / c(h)
    nearly_ml = NGramModel(2, V, "additive", alpha=1e-9).fit(ids)
    for h in range(V):
        want = [pairs[(h, w)] / starts[h] for w in range(V)]
        np.testing.assert_allclose(nearly_ml.probabilities([h]), want, atol=1e-6)


def test_alpha_is_chosen_on_the_training_ids_only():
    ids = markov_text(2000)
    model = NGramModel(3, 5, "additive").fit(ids)
    assert model.alpha is not None
    assert model.alpha > 0
    again = NGramModel(3, 5, "additive").fit(ids)
    assert again.alpha == model.alpha  # deterministic, no validation data seen


@pytest.mark.parametrize("smoothing", ["kneser-ney", "additive"])
@pytest.mark.parametrize("order", [0, 1, 2, 4])
def test_every_context_gives_a_distribution(order, smoothing):
    model = NGramModel(order, 5, smoothing).fit(markov_text())
    for context in [(), (4,), (0, 1, 2), (4, 4, 4, 4, 4)]:
        p = model.probabilities(context)
        assert p.shape == (5,)
        assert (p > 0).all()
        assert p.sum() == pytest.approx(1.0)


def test_order_zero_is_uniform_and_tensors_are_accepted():
    model = NGramModel(0, 7).fit([1, 2, 3])
    assert model.cross_entropy(torch.tensor([0, 6, 5])) == pytest.approx(math.log(7))


def test_on_shakespeare_longer_contexts_help_and_kneser_ney_beats_additive():
    tokenizer = tc.CharTokenizer(tc.load_text())
    ids = torch.tensor(tokenizer.encode(tc.load_text()))
    split = split_ids(ids)
    V = tokenizer.vocab_size
    table = ngram_table(split["train"], split["val"], V, orders=range(5))
    assert table[0] == pytest.approx(math.log(V))
    assert table[0] > table[1] > table[2] > table[3] > table[4]
    assert table[2] < 2.6  # a bigram model: about 2.5 nats per character
    additive = ngram_table(split["train"], split["val"], V, [4], "additive")[4]
    assert table[4] < additive
    best, scores = select_order(split["train"], V, orders=range(1, 6))
    assert best == min(scores, key=scores.get)
    assert best >= 4


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: NGramModel(-1, 5), "order: expected an int ≥ 0, got -1"),
        (lambda: NGramModel(2, 0), "vocab_size: expected a positive int, got 0"),
        (lambda: NGramModel(2, 5, "good-turing"), "smoothing: expected one of"),
        (
            lambda: NGramModel(2, 5).fit([0, 7]),
            "token ids in 0..4, got values from 0 to 7",
        ),
        (
            lambda: NGramModel(2, 5).fit([[0, 1]]),
            "1-D sequence of token ids, got shape (1, 2)",
        ),
        (lambda: NGramModel(2, 5).cross_entropy([0, 1]), "not fitted"),
        (lambda: NGramModel(2, 5).fit(torch.zeros(3)), "integer token ids, got dtype"),
        (lambda: NGramModel(20, 65), "too large"),
    ],
)
def test_bad_input_gets_a_clear_error(make, message):
    with pytest.raises((ValueError, TypeError, RuntimeError)) as error:
        make()
    assert message in str(error.value)
