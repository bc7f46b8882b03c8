"""Token data for the LLM workload: a learnable synthetic stream, token shards on disk, and
`python -m trainer.data prepare` (trainer/prepare.py), which turns text into those shards.

Each rank reads its own windows (rank r takes windows r, r+W, r+2W, ...), so no two ranks
train on the same tokens, and the reader's position is the step, so a resume needs no data state.

Shard layout: DIR/meta.json {"dtype": "uint16"|"uint32", "vocab_size": V, "shards": [...]}
and DIR/shard-00000.bin, ... holding the token ids back to back (little-endian).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from trainer.cli import UsageError, run_main


@dataclass(frozen=True)
class DataConfig:
    source: str = "synthetic"  # "synthetic" or a directory of token shards
    batch_size: int = 4  # sequences per rank per step
    seq_len: int = 128
    seed: int = 0


class SyntheticTokens:
    """Sequences that follow a fixed random successor table with a little noise: the next token
    is predictable from the current one, so a model that learns anything sees its loss fall."""

    def __init__(self, vocab_size: int, seed: int):
        g = torch.Generator().manual_seed(seed)
        self.vocab_size, self.seed = vocab_size, seed
        self._successor_list = torch.randperm(vocab_size, generator=g).tolist()

    def window(self, index: int, length: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + index)
        noise = (torch.rand(length, generator=g) < 0.05).tolist()
        random_tokens = torch.randint(self.vocab_size, (length,), generator=g).tolist()
        successor = self._successor_list
        # Plain Python ints: a per-element tensor loop costs ~40 ms for an 8192-token window.
        out = [random_tokens[0]]
        for i in range(1, length):
            out.append(random_tokens[i] if noise[i] else successor[out[-1]])
        return torch.tensor(out, dtype=torch.long)

    def num_windows(self, length: int) -> int | None:
        return None  # endless


class TokenShards:
    """Token shards on disk, memory-mapped and cut into windows of `length` tokens."""

    def __init__(self, directory: Path, vocab_size: int):
        meta_path = directory / "meta.json"
        if not meta_path.is_file():
            raise UsageError("--data", f"{directory} has no meta.json; make shards with `python -m trainer.data prepare`")
        try:
            meta = json.loads(meta_path.read_text())
            dtype, width = _DTYPES[meta["dtype"]]
            # Private memory maps: pages load on first touch, so a 100 GB corpus costs no RAM up front.
            self.shards = [torch.from_file(str(directory / name), shared=False,
                                           size=(directory / name).stat().st_size // width, dtype=dtype)
                           for name in meta["shards"]]
        except (OSError, ValueError, KeyError, TypeError, RuntimeError) as exc:
            raise UsageError("--data", f"{meta_path} is not a shard index ({exc})") from None
        if meta.get("vocab_size", 0) > vocab_size:
            raise UsageError("--data", f"tokens go up to {meta['vocab_size']} but the model's vocabulary has {vocab_size}")
        self.sizes = [len(s) for s in self.shards]

    def num_windows(self, length: int) -> int:
        return sum(size // length for size in self.sizes)

    def window(self, index: int, length: int) -> torch.Tensor:
        index %= self.num_windows(length)  # past the end, start another pass over the data
        for shard, size in zip(self.shards, self.sizes):
            if index < size // length:
                return shard[index * length:(index + 1) * length].to(torch.long)
            index -= size // length
        raise AssertionError("unreachable")


class RankBatches:
    """The batches one rank trains on. `position` counts the batches already handed out; the
    trainer takes one per step, so a resumed run sets it to the checkpoint's step and continues
    exactly where it stopped."""

    def __init__(self, cfg: DataConfig, rank: int, world_size: int, vocab_size: int):
        self.cfg, self.rank, self.world_size = cfg, rank, world_size
        if cfg.source == "synthetic":
            self.source = SyntheticTokens(vocab_size, cfg.seed)
        else:
            path = Path(cfg.source)
            if not path.is_dir():
                raise UsageError("--data", f"expected 'synthetic' or a directory of token shards, got {cfg.source!r}")
            self.source = TokenShards(path, vocab_size)
            windows = self.source.num_windows(cfg.seq_len + 1)
            if windows < world_size * cfg.batch_size:
                raise UsageError("--data", f"{path} holds {windows} windows of {cfg.seq_len + 1} tokens, "
                                           f"fewer than one step needs ({world_size * cfg.batch_size})")
        self.position = 0

    def window_indices(self, position: int) -> list[int]:
        """Global window indices of batch `position` on this rank: disjoint across ranks."""
        first = position * self.cfg.batch_size
        return [(first + i) * self.world_size + self.rank for i in range(self.cfg.batch_size)]

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        rows = torch.stack([self.source.window(i, self.cfg.seq_len + 1) for i in self.window_indices(self.position)])
        self.position += 1
        return rows[:, :-1], rows[:, 1:]  # inputs, and the next token of each as the label


_DTYPES = {"uint16": (torch.uint16, 2), "uint32": (torch.uint32, 4)}


def main(argv=None) -> int:
    from trainer.prepare import main as prepare_main
    return prepare_main(argv)


if __name__ == "__main__":
    run_main(main)
