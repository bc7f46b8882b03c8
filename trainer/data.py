"""Token data for the LLM workload: a learnable synthetic stream, token shards on disk, and
`python -m trainer.data prepare` (trainer/prepare.py), which turns text into those shards.

The job reads a stream of samples (windows of seq_len + 1 tokens) in one global order that does
not depend on the number of ranks: a pass over the token shards (an epoch) visits every window
once, in a permutation seeded by (seed, epoch); synthetic windows are endless and need none. A
step consumes the next `global batch` samples of that order, split into contiguous runs, one per
rank, each cut into micro-batches. The data position is the global sample index, saved with every
checkpoint, so a resume on any number of ranks continues with the very next sequences.

Document boundaries: `prepare` writes the tokenizer's end-of-text token after every document and
packs documents back to back; a window can span two documents and attention runs across the
separator (GPT-2's and Llama 2's pre-training packing). The model learns that what follows the
separator is unrelated. Nothing is masked, so every label counts.

Shard layout: DIR/meta.json {"dtype": "uint16"|"uint32", "vocab_size": V, "shards": [...]}
and DIR/shard-00000.bin, ... holding the token ids back to back (little-endian).
"""

from __future__ import annotations

from pathlib import Path

import torch

from config.workloads.llm import SequenceBatchConfig, TokenDataConfig
from config.paths import file_status, is_dir, is_plain_name, read_json
from trainer import dist as tdist
from trainer.cli import UsageError, checked_path, run_main


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
        meta = checked_path("--data", read_json, meta_path)
        dtype_name, names, meta_vocab = meta.get("dtype"), meta.get("shards"), meta.get("vocab_size")
        if not isinstance(dtype_name, str) or dtype_name not in _DTYPES:
            raise UsageError("--data", f"{meta_path}: dtype must be one of {', '.join(_DTYPES)}, got {dtype_name!r}")
        if not (isinstance(names, list) and names and all(isinstance(n, str) and n for n in names)):
            raise UsageError("--data", f"{meta_path}: shards must be a non-empty list of file names, got {names!r}")
        outside = next((n for n in names if not is_plain_name(n)), None)  # prepare writes plain names
        if outside is not None:
            raise UsageError("--data", f"{meta_path}: shards must name files in its own folder (no '/', '.' or '..'), "
                                       f"got {outside!r}")
        if meta_vocab is not None and (type(meta_vocab) is not int or meta_vocab < 1):
            raise UsageError("--data", f"{meta_path}: vocab_size must be a positive integer, got {meta_vocab!r}")
        if (meta_vocab or 0) > vocab_size:
            raise UsageError("--data", f"tokens go up to {meta_vocab} but the model's vocabulary has {vocab_size}")
        dtype, width = _DTYPES[dtype_name]
        for name in names:  # mapped, a pipe or a device has no bytes: the run trained on the rest without a word
            checked_path("--data", file_status, directory / name)
        try:
            # Private memory maps: pages load on first touch, so a 100 GB corpus costs no RAM up front.
            self.shards = [torch.from_file(str(directory / name), shared=False,
                                           size=(directory / name).stat().st_size // width, dtype=dtype)
                           for name in names]
        except (OSError, RuntimeError) as exc:
            raise UsageError("--data", f"{meta_path} is not a shard index ({exc})") from None
        self.names = [directory / name for name in names]
        self.vocab_size = vocab_size
        self.sizes = [len(s) for s in self.shards]
        counts = meta.get("shard_tokens")  # written by prepare; an index made by hand may leave it out
        if counts is not None:
            if not isinstance(counts, list) or len(counts) != len(names) or \
                    any(type(c) is not int or c < 0 for c in counts):
                raise UsageError("--data", f"{meta_path}: shard_tokens must list one token count per shard, got "
                                           f"{counts!r}"[:300])
            for name, size, count, file in zip(names, self.sizes, counts, self.names):
                # A copy cut short (an interrupted sync to FSx) trained on what was left without a word
                if size != count or file.stat().st_size % width:
                    raise UsageError("--data", f"{file} holds {file.stat().st_size:,} bytes, {count:,} tokens of "
                                               f"{width} bytes in {meta_path}: a copy cut short or changed; copy "
                                               "it again, or prepare the shards again")

    def num_windows(self, length: int) -> int:
        return sum(size // length for size in self.sizes)

    def window(self, index: int, length: int) -> torch.Tensor:
        window, problem = self._checked(index, length)
        if problem:
            raise UsageError("--data", problem)
        return window

    def problem(self, index: int, length: int) -> str | None:
        """What window() would refuse window `index` for; None when it is fine."""
        return self._checked(index, length)[1]

    def _checked(self, index: int, length: int) -> tuple[torch.Tensor, str | None]:
        index %= self.num_windows(length)  # past the end, start another pass over the data
        for shard, size, name in zip(self.shards, self.sizes, self.names):
            if index < size // length:
                window = shard[index * length:(index + 1) * length].to(torch.long)
                # Checked here, on the host, for the windows a step reads: an id past the embedding
                # fails the first step (IndexError, or a device-side assert on a GPU), and
                # meta.json's vocab_size may be missing or wrong. Scanning every shard at start-up
                # instead would read the whole corpus (about 1 s per 100M-token shard in page cache).
                top = int(window.max())
                if top >= self.vocab_size:
                    return window, (f"{name} holds token id {top}, outside the model's vocabulary of "
                                    f"{self.vocab_size} (ids 0 to {self.vocab_size - 1})")
                return window, None
            index -= size // length
        raise AssertionError("unreachable")


class RankBatches:
    """The micro-batches one rank trains on, step by step. `position` is the global sample index:
    the samples the whole job has consumed, whatever the number of ranks was."""

    def __init__(self, data: TokenDataConfig, batch: SequenceBatchConfig, *, seed: int, rank: int, world_size: int,
                 vocab_size: int, global_batch: int):
        micro = batch.batch_size
        if global_batch % (world_size * micro):
            raise ValueError(f"global batch {global_batch} is not a multiple of {world_size} x {micro}")
        self.micro_batch, self.seq_len, self.seed = micro, batch.seq_len, seed
        self.rank, self.world_size, self.global_batch = rank, world_size, global_batch
        self.accumulation = global_batch // (world_size * micro)
        self.window_count: int | None = None  # None: endless
        if data.source == "synthetic":
            self.source = SyntheticTokens(vocab_size, seed)
        else:
            path = Path(data.source)
            if not checked_path("--data", is_dir, path):
                raise UsageError("--data", f"expected 'synthetic' or a directory of token shards, got {data.source!r}")
            self.source = TokenShards(path, vocab_size)
            self.window_count = self.source.num_windows(self.seq_len + 1)
            if self.window_count < global_batch:
                raise UsageError("--data", f"{path} holds {self.window_count} windows of {self.seq_len + 1} tokens, "
                                           f"fewer than one step needs (the global batch, {global_batch})")
        self.position = 0
        # Each epoch's permutation of the windows; the one before is kept too, for the steps a
        # look-ahead (check_ahead) reads into the next epoch while training finishes this one.
        self._orders: dict[int, torch.Tensor] = {}
        self.problem: str | None = None  # the first this rank's look-ahead found

    def window(self, sample: int) -> int:
        """The window that global sample `sample` reads: its place in its epoch's permutation."""
        if self.window_count is None:
            return sample
        epoch, offset = divmod(sample, self.window_count)
        if epoch not in self._orders:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
            dtype = torch.int32 if self.window_count < 2**31 else torch.int64  # 4 bytes a window
            self._orders = {e: order for e, order in self._orders.items() if e == epoch - 1}
            self._orders[epoch] = torch.randperm(self.window_count, generator=g, dtype=dtype)
        return int(self._orders[epoch][offset])

    def check_ahead(self, steps: range) -> bool:
        """Check, on the host, the windows this rank reads in the steps `steps` after the next one
        (0: the next); True once this one or an earlier check found a problem (kept in
        `problem`). Only this rank knows: the ranks agree on it in a collective they already make
        (trainer/llm.py), before the step that would read it, and raise_agreed_problem() then
        stops every rank with the same line."""
        if self.problem is None and self.window_count is not None:  # synthetic tokens are always in range
            for ahead in steps:
                for samples in self.step_samples(self.position + ahead * self.global_batch):
                    for sample in samples:
                        self.problem = self.problem or self.source.problem(self.window(sample), self.seq_len + 1)
        return self.problem is not None

    def raise_agreed_problem(self) -> None:
        """On every rank at once: UsageError with the lowest rank's problem, the same line on every
        rank, when any rank has one. One collective, at start-up and when the ranks stop for it."""
        if self.window_count is None:
            return  # synthetic tokens, on every rank alike: none can have a problem
        found = tdist.lowest_ranks(self.problem)
        if found is not None:
            raise UsageError("--data", found)

    def step_samples(self, position: int) -> list[list[int]]:
        """This rank's global sample indices for the step that starts at `position`, one list per
        micro-batch: rank r takes the r-th contiguous run of global_batch / ranks samples."""
        micro = self.micro_batch
        first = position + self.rank * self.accumulation * micro
        return [list(range(first + i * micro, first + (i + 1) * micro)) for i in range(self.accumulation)]

    def next_step(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(inputs, labels) of each micro-batch of the next step; moves the position past the step."""
        out = []
        for samples in self.step_samples(self.position):
            rows = torch.stack([self.source.window(self.window(s), self.seq_len + 1) for s in samples])
            out.append((rows[:, :-1], rows[:, 1:]))  # inputs, and the next token of each as the label
        self.position += self.global_batch
        if self.window_count is not None:  # an epoch training has left is not read again: free its order
            current = self.position // self.window_count
            self._orders = {e: order for e, order in self._orders.items() if e >= current}
        return out

    # A checkpoint holds the position (DCP's Stateful), so a resume on any world size, or with a
    # new global batch, continues from the next unseen sample.
    def state_dict(self) -> dict:
        return {"samples": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.position = int(state["samples"])


_DTYPES = {"uint16": (torch.uint16, 2), "uint32": (torch.uint32, 4)}


def main(argv=None) -> int:
    from trainer.prepare import main as prepare_main
    return prepare_main(argv)


if __name__ == "__main__":
    run_main(main)
