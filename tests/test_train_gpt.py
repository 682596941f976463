"""transformer_course.train_gpt (chapter 6): the command line, one process and several."""

import json
import os
import subprocess
import sys

import pytest
import torch

from transformer_course import train_gpt
from transformer_course.gpt import GPTConfig
from transformer_course.train import History, TrainConfig, load_checkpoint

TINY = ["--config", "tiny", "--device", "cpu", "--quiet"]
# the tiny config: 20 steps, a validation (and a checkpoint) after steps 7, 15, 19
VAL_STEPS = [7, 15, 19]


def train(out, *extra):
    return train_gpt.main(["train", *TINY, "--out", str(out), *extra])


def records(out):
    return [json.loads(line) for line in (out / "metrics.jsonl").open()]


def weights(path):
    return load_checkpoint(path)["model"]


def assert_same_weights(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


def largest_difference(a, b):
    return max((a[name] - b[name]).abs().max().item() for name in a)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A folder with a finished tiny run."""
    out = tmp_path_factory.mktemp("run") / "tiny"
    assert train(out) == 0
    return out


def test_train_writes_checkpoint_config_and_metrics(trained):
    assert sorted(p.name for p in trained.iterdir()) == [
        "checkpoint.pt",
        "config.json",
        "metrics.jsonl",
    ]
    state = load_checkpoint(trained / "checkpoint.pt")
    assert state["step"] == 20
    saved = json.loads((trained / "config.json").read_text())
    assert saved["config"] == "tiny"
    assert saved["model"] == train_gpt.CONFIGS["tiny"].model
    assert saved["train"]["steps"] == 20
    assert len(saved["vocab"]) == 65  # tiny Shakespeare's characters
    assert saved["data"] == {"text": "tinyshakespeare", "val_fraction": 0.1}

    lines = records(trained)
    assert [r["step"] for r in lines if "train_loss" in r] == list(range(20))
    assert [r["step"] for r in lines if "val_loss" in r] == VAL_STEPS
    assert set(lines[0]) == {"step", "train_loss", "lr", "grad_norm"}
    # the file holds exactly the history fit returned (and checkpointed)
    history = History(**state["history"])
    assert lines == history.records()
    assert history.val_losses[-1] < history.train_losses[0]  # it learned something


def test_an_interrupted_run_resumes_to_the_same_result(trained, tmp_path):
    out = tmp_path / "cut"
    # stopped as if by Ctrl-C when step 11 starts: the last checkpoint is after step 7
    assert train(out, "--interrupt-at", "11") == 130
    assert load_checkpoint(out / "checkpoint.pt")["step"] == 8
    # whole lines for steps 0-10 and the validation after step 7, as in the whole run
    assert records(out) == records(trained)[:12]

    assert train(out, "--resume") == 0
    assert_same_weights(
        weights(out / "checkpoint.pt"), weights(trained / "checkpoint.pt")
    )
    # steps 8-10 were run twice, but each is recorded once, as in the whole run
    assert (out / "metrics.jsonl").read_text() == (
        trained / "metrics.jsonl"
    ).read_text()


def test_resume_needs_a_checkpoint_and_the_same_run(trained, tmp_path, capsys):
    assert train(tmp_path / "empty", "--resume") == 1
    assert "--resume: no checkpoint at" in capsys.readouterr().err
    assert train(trained, "--seed", "1", "--resume") == 1
    assert "holds another run (train differ" in capsys.readouterr().err
    assert train(trained) == 1  # a new run would overwrite it
    assert "checkpoint.pt exists: pass --resume" in capsys.readouterr().err


def test_unknown_config_names_the_known_ones(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        train_gpt.main(["train", "--config", "huge", "--out", str(tmp_path)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'huge'" in err
    assert "'baby'" in err


def sample(capsys, out, *extra):
    assert train_gpt.main(["sample", "--out", str(out), *extra]) == 0
    return capsys.readouterr().out


def test_sample_prints_the_prompt_and_the_requested_characters(trained, capsys):
    args = ("--prompt", "ROMEO:", "--tokens", "40", "--seed", "3", "--top-k", "20")
    text = sample(capsys, trained, *args)
    assert text.startswith("ROMEO:")
    assert text.endswith("\n")
    assert len(text) == len("ROMEO:") + 40 + 1
    assert sample(capsys, trained, *args) == text  # the seed decides
    assert sample(capsys, trained, *args, "--no-cache") == text  # the cache does not
    # more than the context of 32 characters: the window slides, same text
    long = ("--tokens", "70", "--seed", "5")
    assert sample(capsys, trained, *long) == sample(
        capsys, trained, *long, "--no-cache"
    )
    assert sample(capsys, trained, *args[:-3], "4") != text  # another seed


def test_sample_errors_are_clear(trained, tmp_path, capsys):
    assert train_gpt.main(["sample", "--out", str(tmp_path)]) == 1
    assert "no checkpoint.pt in" in capsys.readouterr().err
    assert train_gpt.main(["sample", "--out", str(trained), "--prompt", "Thé ñ"]) == 1
    err = capsys.readouterr().err
    assert "2 character(s) are not in the vocabulary" in err
    assert "'é', 'ñ'" in err


def test_named_configs():
    baby = train_gpt.CONFIGS["baby"]  # nanoGPT's config for a CPU
    assert baby.model == {
        "n_layers": 4,
        "n_heads": 4,
        "d_model": 128,
        "block_size": 64,
        "positions": "rope",  # chapter 5's rotary positions; the rest is nanoGPT's
    }
    assert baby.train == {
        "steps": 2000,
        "batch_size": 12,
        "lr": 1e-3,
        "min_lr_ratio": 0.1,
        "warmup_steps": 100,
        "betas": (0.9, 0.99),
        "weight_decay": 0.1,
        "grad_clip": 1.0,
        "eval_every": 250,
        "eval_batches": 200,
    }
    gpu = train_gpt.CONFIGS["gpu"]  # nanoGPT's config for a GPU
    assert {k: gpu.model[k] for k in ("n_layers", "n_heads", "d_model")} == {
        "n_layers": 6,
        "n_heads": 6,
        "d_model": 384,
    }
    assert (gpu.model["block_size"], gpu.model["dropout"]) == (256, 0.2)
    assert (gpu.train["steps"], gpu.train["batch_size"]) == (5000, 64)
    assert (gpu.train["autocast"], gpu.train["compile"]) == ("bfloat16", True)
    for name, run in train_gpt.CONFIGS.items():
        dropout = GPTConfig(vocab_size=65, **run.model).dropout
        assert dropout == (0.2 if name == "gpu" else 0.0)  # as nanoGPT's
        TrainConfig(**run.train)  # valid


def torchrun(out, *extra):
    """The tiny config on 2 CPU processes (gloo), as torchrun starts them."""
    command = [
        *(sys.executable, "-m", "torch.distributed.run"),  # torchrun, of this venv
        *("--standalone", "--nproc_per_node=2"),
        *("-m", "transformer_course.train_gpt", "train", *TINY, "--out", str(out)),
        *extra,
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TRANSFORMER_COURSE_THREADS": "1"}
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=180)


def test_two_processes_match_one_and_resume(trained, tmp_path):
    """torchrun --nproc_per_node=2: DistributedDataParallel over gloo, on the CPU.

    The run is interrupted at step 11 on both ranks, then resumed on two
    (tests/test_train.py checks that a resumed data-parallel run equals an
    uninterrupted one bit for bit). Each rank computes the loss of its half of
    every global batch of 8 windows, and the gradients are averaged across
    ranks by an all-reduce. That is the one-process gradient, but summed in
    another order, so float32 results differ by rounding: losses by about 5e-7
    in our runs, parameters after 20 AdamW steps by about 5e-6 (AdamW divides
    by √v, which enlarges the relative error of small gradient components),
    gradient norms by up to 3e-5 relative. The tolerances are about ten times
    that. The two ranks themselves must agree exactly: they apply the same
    averaged gradient.
    """
    out = tmp_path / "ddp"
    result = torchrun(out, "--interrupt-at", "11")
    assert result.returncode != 0  # torchrun reports the interrupted ranks
    assert "interrupted; continue with --resume" in result.stderr
    assert load_checkpoint(out / "checkpoint.pt")["step"] == 8
    result = torchrun(out, "--resume", "--rank-states", str(tmp_path / "ranks"))
    assert result.returncode == 0, result.stderr[-3000:]

    rank0 = torch.load(tmp_path / "ranks" / "rank0.pt")["model"]
    rank1 = torch.load(tmp_path / "ranks" / "rank1.pt")["model"]
    assert_same_weights(rank0, rank1)  # bit for bit
    assert_same_weights(weights(out / "checkpoint.pt"), rank0)  # rank 0 wrote it

    one = weights(trained / "checkpoint.pt")  # one process, the same global batches
    assert largest_difference(one, rank0) < 5e-5
    two_records, one_records = records(out), records(trained)
    # every step and validation once, in order, despite the interruption
    assert [(r["step"], r.keys()) for r in two_records] == [
        (r["step"], r.keys()) for r in one_records
    ]
    for two, single in zip(two_records, one_records, strict=True):
        for key in ("train_loss", "val_loss"):
            if key in two:
                assert two[key] == pytest.approx(single[key], abs=1e-5), two
        if "lr" in two:
            assert two["lr"] == single["lr"]
            assert two["grad_norm"] == pytest.approx(single["grad_norm"], rel=1e-3)
