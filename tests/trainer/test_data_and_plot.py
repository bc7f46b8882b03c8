"""trainer.data prepare (a tokenizer trained here, offline), training on its shards, trainer.plot."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from config.workloads.llm import SequenceBatchConfig, TokenDataConfig
from trainer.data import RankBatches
from trainer_procs import REPO, job_env

CORPUS = [
    "the quick brown fox jumps over the lazy dog. " * 40,
    "distributed training shards the model across ranks and checkpoints it often. " * 40,
    "a checkpoint counts only when it is complete, and resume picks the newest one. " * 40,
]


def _python(*argv, timeout=120):
    return subprocess.run([sys.executable, *argv], cwd=REPO, env=job_env(), capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    root = tmp_path_factory.mktemp("data")
    text = root / "text"
    text.mkdir()
    for i, body in enumerate(CORPUS):
        (text / f"doc{i}.txt").write_text(body)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train([str(p) for p in text.glob("*.txt")],
              trainers.BpeTrainer(vocab_size=300, special_tokens=["<unk>", "<|endoftext|>"], show_progress=False))
    tok.save(str(root / "tokenizer.json"))
    p = _python("-m", "trainer.data", "prepare", "--tokenizer", str(root / "tokenizer.json"), "--input", str(text),
                "--output", str(root / "tokens"), "--shard-tokens", "500")
    assert p.returncode == 0, p.stderr
    return root, p


def test_prepare_writes_shards_with_a_progress_bar_and_an_index(shards):
    root, p = shards
    meta = json.loads((root / "tokens" / "meta.json").read_text())
    assert meta["dtype"] == "uint16" and meta["vocab_size"] <= 300
    assert meta["eos_id"] == 1  # <|endoftext|> separates the documents (trainer/data.py's packing)
    assert len(meta["shards"]) >= 2 and meta["tokens"] > 500  # split at --shard-tokens
    sizes = [(root / "tokens" / s).stat().st_size // 2 for s in meta["shards"]]
    assert sum(sizes) == meta["tokens"] and max(sizes) <= 500
    assert "tokenizing" in p.stderr  # tqdm's bar


def test_shard_windows_are_disjoint_across_ranks_and_hold_the_corpus_tokens(shards):
    root, _ = shards
    data, batch = TokenDataConfig(str(root / "tokens")), SequenceBatchConfig(batch_size=2, seq_len=32)
    r0, r1 = (RankBatches(data, batch, seed=0, rank=rank, world_size=2, vocab_size=1024, global_batch=4)
              for rank in (0, 1))
    [(x0, y0)] = r0.next_step()
    [(x1, _)] = r1.next_step()
    assert not torch.equal(x0, x1) and torch.equal(x0[:, 1:], y0[:, :-1])
    assert int(x0.max()) < 300


def test_the_llm_trains_on_prepared_shards(shards, tmp_path):
    root, _ = shards
    p = _python("-m", "trainer.llm", "--data", str(root / "tokens"), "--steps", "8", "--batch-size", "2",
                "--seq-len", "32", "--log-every", "4", "--metrics-file", str(tmp_path / "m.jsonl"))
    assert p.returncode == 0, p.stderr[-3000:]
    losses = [json.loads(line)["loss"] for line in (tmp_path / "m.jsonl").read_text().splitlines()]
    assert len(losses) == 2 and losses[1] < losses[0]


@pytest.mark.parametrize("argv, field", [
    (["-m", "trainer.llm", "--data", "/nonexistent/tokens"], "--data"),
    (["-m", "trainer.llm", "--seq-len", "100000"], "--seq-len"),
    (["-m", "trainer.llm", "--model", "gpt-9"], "--model"),
    (["-m", "trainer.data", "prepare", "--tokenizer", "/nonexistent.json", "--input", "."], "--tokenizer"),
    (["-m", "trainer.plot", "/nonexistent.jsonl"], "METRICS"),
])
def test_bad_arguments_and_files_give_one_line_naming_the_field(argv, field):
    p = _python(*argv)
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in p.stderr, p.stderr


@pytest.mark.parametrize("module", ["trainer.llm", "trainer.data", "trainer.plot"])
def test_help_works(module):
    assert _python("-m", module, "--help").returncode == 0


def test_plot_draws_loss_and_throughput(tmp_path):
    metrics = tmp_path / "m.jsonl"
    # The window of step 25 was skipped as non-finite (loss null) and step 5 was warm-up (no rate).
    metrics.write_text("".join(json.dumps({"step": s, "loss": None if s == 25 else 5 - s / 10, "lr": 1e-3,
                                           "tokens_per_sec": None if s == 5 else 1000 + s, "mfu": None}) + "\n"
                               for s in range(5, 50, 5)))
    p = _python("-m", "trainer.plot", str(metrics), "-o", str(tmp_path / "curves.png"))
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
