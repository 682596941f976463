"""transformer_course.train (chapters 4, 6, 7): the training loop."""

import itertools
import math
import os

import pytest
import torch
from torch import nn

import transformer_course as tc
from transformer_course import train

F64 = torch.float64


class TinyClassifier(nn.Module):
    """A float64 two-layer classifier with dropout, so that random state matters."""

    def __init__(self, d_in=4, d_hidden=8, n_classes=3):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(d_in, d_hidden),
            nn.LayerNorm(d_hidden),
            nn.ReLU(),
            nn.Dropout(0.2),
            nn.Linear(d_hidden, n_classes),
        ).double()

    def forward(self, x):
        return self.net(x)


def tiny_data(seed=0, n=64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, dtype=F64, generator=g)
    y = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()  # 3 classes
    return train.tensor_batches(
        {"train": (x[:48], y[:48]), "val": (x[48:], y[48:])}, batch_size=8, seed=seed
    )


def config(**changes):
    settings = {
        "steps": 12,
        "lr": 3e-2,
        "warmup_steps": 3,
        "eval_every": 4,
        "eval_batches": 2,
        "device": "cpu",
        "seed": 0,
    }
    settings["warmup_steps"] = min(3, changes.get("steps", 12) - 1)
    return tc.TrainConfig(**{**settings, **changes})


def fresh_model(seed=0):
    torch.manual_seed(seed)
    return TinyClassifier()


def test_training_lowers_the_loss_and_records_every_step():
    model = fresh_model()
    history = tc.fit(model, tiny_data(), train.cross_entropy_loss, config(steps=40))
    assert history.steps == list(range(40))
    assert len(history.train_losses) == len(history.learning_rates) == 40
    assert len(history.grad_norms) == 40
    assert history.val_steps == [3, 7, 11, 15, 19, 23, 27, 31, 35, 39]
    assert history.val_losses[-1] < history.val_losses[0]
    assert history.learning_rates == [
        tc.learning_rate(s, config(steps=40)) for s in range(40)
    ]
    assert model.training  # back in training mode after the last evaluation


def test_schedule_at_chosen_steps():
    cfg = tc.TrainConfig(steps=101, lr=1.0, warmup_steps=10, min_lr_ratio=0.1)
    assert tc.learning_rate(0, cfg) == pytest.approx(1 / 11)  # never 0
    assert tc.learning_rate(9, cfg) == pytest.approx(10 / 11)
    assert tc.learning_rate(10, cfg) == pytest.approx(1.0)  # end of warm-up: the peak
    assert tc.learning_rate(55, cfg) == pytest.approx(0.55)  # halfway down the cosine
    assert tc.learning_rate(100, cfg) == pytest.approx(0.1)  # the last step: lr·0.1
    assert tc.learning_rate(500, cfg) == pytest.approx(0.1)  # and after it
    rates = [tc.learning_rate(s, cfg) for s in range(101)]
    assert all(a < b for a, b in itertools.pairwise(rates[:11]))  # warming up
    assert all(a > b for a, b in itertools.pairwise(rates[10:]))  # decaying


def test_schedule_without_warm_up_starts_at_the_peak():
    cfg = tc.TrainConfig(steps=5, lr=2.0, warmup_steps=0, min_lr_ratio=0.0)
    assert [tc.learning_rate(s, cfg) for s in (0, 2, 4)] == pytest.approx(
        [2.0, 1.0, 0.0]
    )


def test_weight_decay_applies_to_matrices_only():
    model = nn.Sequential(nn.Embedding(5, 4), nn.Linear(4, 4), nn.LayerNorm(4))
    decay, no_decay = train.parameter_groups(model, weight_decay=0.1)
    assert decay["weight_decay"] == 0.1
    assert no_decay["weight_decay"] == 0.0
    assert {id(p) for p in decay["params"]} == {
        id(model[0].weight),
        id(model[1].weight),
    }
    assert {id(p) for p in no_decay["params"]} == {
        id(model[1].bias),
        id(model[2].weight),
        id(model[2].bias),
    }


def test_clipping_records_the_norm_before_and_updates_with_the_clipped_gradient(
    monkeypatch,
):
    cfg = config(steps=1, grad_clip=0.01, eval_every=None)
    get_batch = tiny_data()
    by_hand = fresh_model()  # the same weights, and below the same dropout mask
    torch.manual_seed(cfg.seed)  # as fit seeds a new run
    train.cross_entropy_loss(by_hand, get_batch("train", 0)).backward()
    groups = train.parameter_groups(by_hand, cfg.weight_decay)  # fit's order
    raw = torch.cat([p.grad.flatten() for g in groups for p in g["params"]])
    norm = raw.norm().item()
    assert norm > 10 * cfg.grad_clip  # so clipping has work to do

    seen = {}
    adamw_step = torch.optim.AdamW.step

    def spy(optimizer, *args, **kwargs):
        params = [p for group in optimizer.param_groups for p in group["params"]]
        seen["g"] = torch.cat([p.grad.flatten() for p in params])
        result = adamw_step(optimizer, *args, **kwargs)
        seen["m"] = torch.cat([optimizer.state[p]["exp_avg"].flatten() for p in params])
        return result

    monkeypatch.setattr(torch.optim.AdamW, "step", spy)
    history = tc.fit(fresh_model(), get_batch, train.cross_entropy_loss, cfg)
    assert history.grad_norms == [pytest.approx(norm, rel=1e-12)]  # before clipping
    clipped = raw * (cfg.grad_clip / (norm + 1e-6))  # clip_grad_norm_'s scaling
    torch.testing.assert_close(seen["g"], clipped)
    # AdamW's first moment after one step is (1 − β1)·g: the update used g clipped
    torch.testing.assert_close(seen["m"], (1 - cfg.betas[0]) * clipped)


def test_a_resumed_run_equals_an_uninterrupted_one(tmp_path):
    cfg = config(checkpoint_path=tmp_path / "whole.pt", checkpoint_every=5)
    whole_model = fresh_model()
    whole = tc.fit(whole_model, tiny_data(), train.cross_entropy_loss, cfg)

    get_batch = tiny_data()

    def crash_at_step_7(split, step):
        if split == "train" and step == 7:
            raise KeyboardInterrupt  # the kernel was interrupted
        return get_batch(split, step)

    cfg = config(checkpoint_path=tmp_path / "cut.pt", checkpoint_every=5)
    with pytest.raises(KeyboardInterrupt):
        tc.fit(fresh_model(), crash_at_step_7, train.cross_entropy_loss, cfg)
    assert train.load_checkpoint(cfg.checkpoint_path)["step"] == 5
    torch.manual_seed(123)  # another process: other random state, other weights
    resumed_model = fresh_model(seed=1)
    resumed = tc.fit(
        resumed_model, get_batch, train.cross_entropy_loss, cfg, resume=True
    )

    assert resumed == whole  # every loss, rate and norm, exactly
    for (name, a), (_, b) in zip(
        whole_model.state_dict().items(),
        resumed_model.state_dict().items(),
        strict=True,
    ):
        assert torch.equal(a, b), name
    whole_state = train.load_checkpoint(tmp_path / "whole.pt")
    cut_state = train.load_checkpoint(tmp_path / "cut.pt")
    assert whole_state["step"] == cut_state["step"] == 12
    assert torch.equal(
        whole_state["random_states"]["torch"], cut_state["random_states"]["torch"]
    )


def test_resume_needs_a_checkpoint(tmp_path):
    cfg = config(checkpoint_path=tmp_path / "missing.pt")
    with pytest.raises(
        FileNotFoundError, match=r"resume: no checkpoint at .*missing\.pt"
    ):
        tc.fit(fresh_model(), tiny_data(), train.cross_entropy_loss, cfg, resume=True)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_loss_names_the_step(bad):
    def loss_fn(model, batch):
        loss = train.cross_entropy_loss(model, batch)
        return loss * bad if calls.append(None) or len(calls) == 4 else loss

    calls = []
    with pytest.raises(FloatingPointError, match=r"^step 3: the training loss is"):
        tc.fit(fresh_model(), tiny_data(), loss_fn, config(eval_every=None))


def test_a_loss_that_is_not_a_scalar_is_refused():
    def per_example(model, batch):
        inputs, targets = batch
        return nn.functional.cross_entropy(model(inputs), targets, reduction="none")

    with pytest.raises(TypeError, match=r"step 0: the training loss must be a scalar"):
        tc.fit(fresh_model(), tiny_data(), per_example, config(eval_every=None))


def test_a_failed_write_leaves_the_previous_checkpoint_whole(tmp_path, monkeypatch):
    path = tmp_path / "run.pt"
    train.save_checkpoint(path, {"step": 1, "weights": torch.arange(3)})

    def broken_save(state, file):
        file.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(train.torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        train.save_checkpoint(path, {"step": 2, "weights": torch.arange(5)})
    monkeypatch.undo()
    state = train.load_checkpoint(path)
    assert state["step"] == 1
    assert torch.equal(state["weights"], torch.arange(3))
    assert os.listdir(tmp_path) == ["run.pt"]  # no temporary file left behind


def test_progress_bar_is_quiet_when_asked(capfd, monkeypatch):
    monkeypatch.delenv("TQDM_DISABLE", raising=False)
    cfg = config(steps=2, eval_every=None)
    tc.fit(fresh_model(), tiny_data(), train.cross_entropy_loss, cfg, progress=False)
    assert capfd.readouterr().err == ""
    tc.fit(fresh_model(), tiny_data(), train.cross_entropy_loss, cfg)
    assert "2/2" in capfd.readouterr().err
    monkeypatch.setenv("TQDM_DISABLE", "1")
    tc.fit(fresh_model(), tiny_data(), train.cross_entropy_loss, cfg)
    assert capfd.readouterr().err == ""


def test_batches_move_to_the_device_nested_or_not():
    Pair = tc.Digits  # a NamedTuple
    batch = (
        torch.zeros(2),
        [torch.ones(1), {"mask": torch.ones(3, dtype=torch.bool)}],
        Pair(*(torch.zeros(1) for _ in range(4))),
        "label",
    )
    moved = train.to_device(batch, "meta")
    assert moved[0].is_meta
    assert moved[1][0].is_meta
    assert moved[1][1]["mask"].is_meta
    assert isinstance(moved[2], Pair)
    assert moved[2].x_train.is_meta
    assert moved[3] == "label"


def test_the_model_is_moved_to_the_configured_device():
    model = fresh_model()
    seen = []

    def loss_fn(model, batch):
        seen.append({t.device.type for t in batch})
        return train.cross_entropy_loss(model, batch)

    tc.fit(model, tiny_data(), loss_fn, config(steps=2, eval_every=1))
    assert seen == [{"cpu"}] * 6  # 2 training batches, 2 × 2 validation
    assert {p.device.type for p in model.parameters()} == {"cpu"}


def test_tensor_batches_depend_on_the_step_alone():
    get_batch = tiny_data()
    first = get_batch("train", 3)
    torch.manual_seed(99)  # global random state plays no part
    again = get_batch("train", 3)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], get_batch("train", 4)[0])
    assert first[0].shape == (8, 4)
    with pytest.raises(ValueError, match=r"split: expected one of \['train', 'val'\]"):
        get_batch("test", 0)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"steps": 0}, "steps: expected a positive int, got 0"),
        ({"warmup_steps": 12}, r"warmup_steps: expected an int in \[0, steps\)"),
        ({"min_lr_ratio": 2.0}, "min_lr_ratio"),
        ({"grad_clip": 0.0}, "grad_clip: expected None or a positive float"),
        ({"eval_every": 0}, "eval_every: expected None or a positive int"),
        ({"betas": (0.9, 1.0)}, "betas"),
        ({"autocast": "float16"}, 'autocast: expected None or "bfloat16"'),
        ({"compile": "yes"}, "compile: expected True or False"),
    ],
)
def test_bad_config_values_are_named(changes, message):
    with pytest.raises(ValueError, match=message):
        config(**changes)


@pytest.mark.parametrize("name", train.__all__)
def test_every_public_object_names_its_chapter(name):
    assert "Chapter" in getattr(train, name).__doc__


def test_label_smoothing_mixes_the_target_with_the_uniform_distribution():
    """(1 − ε)·(−ln p_y) + ε·mean over classes of (−ln p_c), as torch defines it."""
    from functools import partial

    from transformer_course.train import cross_entropy_loss

    torch.manual_seed(0)
    logits = torch.randn(6, 10, dtype=torch.float64)
    targets = torch.randint(10, (6,))
    model = nn.Identity()
    log_p = logits.log_softmax(-1)
    plain = -log_p[torch.arange(6), targets].mean()
    uniform = -log_p.mean()
    smoothed = partial(cross_entropy_loss, label_smoothing=0.1)
    torch.testing.assert_close(cross_entropy_loss(model, (logits, targets)), plain)
    torch.testing.assert_close(
        smoothed(model, (logits, targets)), 0.9 * plain + 0.1 * uniform
    )


class Float32Classifier(TinyClassifier):
    def __init__(self):
        super().__init__()
        self.float()


def float32_data(seed=0):
    get_batch = tiny_data(seed)
    return lambda split, k: tuple(
        t.float() if t.is_floating_point() else t for t in get_batch(split, k)
    )


def test_bfloat16_autocast_runs_the_forward_pass_in_bfloat16_and_trains():
    """The GPU config's autocast, here on the CPU (the same torch.autocast):
    the linear layers compute in bfloat16, the parameters and their updates
    stay float32, and the loss falls as it does in float32."""
    seen = []
    torch.manual_seed(0)
    model = Float32Classifier()
    model.net[0].register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    history = tc.fit(
        model,
        float32_data(),
        train.cross_entropy_loss,
        config(steps=40, autocast="bfloat16"),
    )
    assert set(seen) == {torch.bfloat16}  # training and validation alike
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert history.val_losses[-1] < history.val_losses[0]
    torch.manual_seed(0)
    plain = tc.fit(
        Float32Classifier(), float32_data(), train.cross_entropy_loss, config(steps=40)
    )
    assert abs(history.val_losses[-1] - plain.val_losses[-1]) < 0.05
    assert history.val_losses[-1] != plain.val_losses[-1]  # bfloat16 rounds


def test_compile_runs_the_training_steps_through_torch_compile(monkeypatch):
    """compile=True hands the model to torch.compile for the training steps
    (what it returns computes each loss); validation and the checkpoint use
    the model itself. torch.compile is replaced here by a stand-in that
    counts its calls: compiling takes a C compiler and a minute on a CPU."""
    compiled_calls = []

    class Compiled(nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            compiled_calls.append(x.shape)
            return self.inner(x)

    monkeypatch.setattr(torch, "compile", Compiled)
    model = fresh_model()
    history = tc.fit(model, tiny_data(), train.cross_entropy_loss, config(compile=True))
    assert len(compiled_calls) == len(history.steps) == 12
    assert history.val_losses  # validated on the model itself, not the stand-in
