import torch

import transformer_course as tc
from transformer_course.benchmark import peak_memory, time_call

MIB = 2**20


def test_peak_counts_a_new_tensor():
    assert peak_memory(lambda: torch.zeros(1024, 1024)) == 4 * MIB


def test_peak_subtracts_freed_tensors():
    def one_at_a_time():
        for _ in range(5):
            block = torch.ones(256, 1024)  # 1 MiB, freed when the next replaces it
            del block
        return None

    def all_at_once():
        return [torch.ones(256, 1024) for _ in range(5)]

    assert peak_memory(one_at_a_time) == 1 * MIB
    assert peak_memory(all_at_once) == 5 * MIB


def test_views_are_not_counted_twice():
    base = torch.zeros(10)
    assert peak_memory(lambda: (base + 1).view(2, 5).t()) == 40


def test_naive_attention_materialises_the_n_by_n_matrix():
    q = k = v = torch.randn(1, 2, 256, 8)  # (B, H, N, d)
    n_by_n = 1 * 2 * 256 * 256 * 4
    naive = peak_memory(lambda: tc.scaled_dot_product_attention(q, k, v))
    fused = peak_memory(
        lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)
    )
    assert naive >= n_by_n
    assert fused < n_by_n / 4


def test_time_call_returns_a_positive_median():
    seconds = time_call(lambda: torch.randn(100, 100) @ torch.randn(100, 100), repeat=3)
    assert 0 < seconds < 5
