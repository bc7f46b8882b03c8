"""The LLM's data order (trainer/data.py): one global order of samples whatever the number of
ranks, a permutation of the windows per epoch, and a position that is the global sample index."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch

from config.workloads.llm import SequenceBatchConfig, TokenDataConfig
from trainer.cli import UsageError
from trainer.data import RankBatches

SEQ = 7  # windows of 8 tokens


@pytest.fixture
def shards(tmp_path):
    """Two shards holding 13 windows whose tokens name the window: window w is w*8 .. w*8+7."""
    tokens = torch.arange(13 * (SEQ + 1), dtype=torch.int32).to(torch.uint16)
    (tmp_path / "shard-00000.bin").write_bytes(tokens[:5 * (SEQ + 1) + 3].numpy().tobytes())  # 5 windows + a tail
    (tmp_path / "shard-00001.bin").write_bytes(tokens[5 * (SEQ + 1):].numpy().tobytes())  # 8 windows
    (tmp_path / "meta.json").write_text(json.dumps({"dtype": "uint16", "vocab_size": 1024,
                                                    "shards": ["shard-00000.bin", "shard-00001.bin"]}))
    return str(tmp_path)


def _batches(source="synthetic", *, world=1, rank=0, micro=2, global_batch=8, seed=0) -> RankBatches:
    return RankBatches(TokenDataConfig(source), SequenceBatchConfig(batch_size=micro, seq_len=SEQ), seed=seed,
                       rank=rank, world_size=world, vocab_size=1024, global_batch=global_batch)


@pytest.mark.parametrize("world", [1, 2, 4])
def test_a_step_cuts_the_same_micro_batches_from_the_global_batch_on_any_number_of_ranks(world):
    ranks = [_batches(world=world, rank=r) for r in range(world)]
    assert {r.accumulation for r in ranks} == {8 // (2 * world)}
    micro_batches = [tuple(m) for r in ranks for m in r.step_samples(16)]
    # Samples 16..23 (the third step), in the same pairs whatever the world size.
    assert sorted(micro_batches) == [(16, 17), (18, 19), (20, 21), (22, 23)]


def test_an_epoch_visits_every_window_once_in_an_order_seeded_by_seed_and_epoch(shards):
    data = _batches(shards)
    first, second = [data.window(s) for s in range(13)], [data.window(s) for s in range(13, 26)]
    assert sorted(first) == sorted(second) == list(range(13))
    assert first != second and first != list(range(13))
    assert [_batches(shards, world=4, rank=3, micro=1, global_batch=4).window(s) for s in range(13)] == first
    assert [_batches(shards, seed=1).window(s) for s in range(13)] != first
    # The sample reads the window it names (the tail of shard 0 belongs to no window).
    (inputs, labels), *_ = _batches(shards, micro=1, global_batch=1).next_step()
    assert inputs[0, 0] == first[0] * (SEQ + 1) and torch.equal(inputs[:, 1:], labels[:, :-1])


def test_the_position_is_the_global_sample_index_and_resumes_on_another_world_size(shards):
    two = [_batches(shards, world=2, rank=r, micro=1, global_batch=4) for r in range(2)]
    for r in two:
        r.next_step()
        r.next_step()
    state = two[0].state_dict()
    assert state == two[1].state_dict() == {"samples": 8}
    one = _batches(shards, micro=2, global_batch=4)
    one.load_state_dict(state)
    resumed = torch.cat([x for x, _ in one.next_step()])
    for r in two:
        r.position = 8
    uninterrupted = torch.cat([x for r in two for x, _ in r.next_step()])
    assert torch.equal(resumed, uninterrupted)  # samples 8..11: the epoch's end and the next epoch's start


def test_a_corpus_smaller_than_one_global_batch_is_a_usage_error(shards):
    with pytest.raises(UsageError, match="holds 13 windows of 8 tokens, fewer than one step needs .*16"):
        _batches(shards, global_batch=16)


@pytest.mark.parametrize("field, value", [("vocab_size", "1024"), ("vocab_size", True), ("vocab_size", 0),
                                          ("dtype", ["uint16"]), ("dtype", "int8"), ("shards", "shard-00000.bin"),
                                          ("shards", [3]), ("shards", [])])
def test_a_shard_index_field_of_the_wrong_type_is_one_usage_error_naming_data_and_the_field(shards, field, value):
    meta = json.loads((Path(shards) / "meta.json").read_text())
    (Path(shards) / "meta.json").write_text(json.dumps({**meta, field: value}))
    with pytest.raises(UsageError) as err:
        _batches(shards)
    assert str(err.value).startswith(f"--data: {Path(shards) / 'meta.json'}: {field} must be ")


@pytest.mark.parametrize("name", ["../outside.bin", "{outside}", "sub\0x.bin", "..", "."])
def test_a_shard_name_that_leaves_the_data_folder_is_one_usage_error_naming_data_and_the_name(shards, name):
    """meta.json sits on shared storage: a name in it that climbs out of --data ('..', an absolute
    path) had the run train on, and look up token ids in, a file of someone else's; a NUL byte
    ended in a ValueError traceback."""
    outside = Path(shards).parent / "outside.bin"
    outside.write_bytes(torch.arange(13 * (SEQ + 1), dtype=torch.int32).to(torch.uint16).numpy().tobytes())
    name = name.format(outside=outside)
    meta = json.loads((Path(shards) / "meta.json").read_text())
    (Path(shards) / "meta.json").write_text(json.dumps({**meta, "shards": ["shard-00000.bin", name]}))
    with pytest.raises(UsageError) as err:
        _batches(shards)
    assert str(err.value) == (f"--data: {Path(shards) / 'meta.json'}: shards must name files in its own folder "
                              f"(no '/', '.' or '..'), got {name!r}")


@pytest.mark.parametrize("special, what", [("pipe", "a named pipe"), ("device", "a character device")])
def test_a_shard_that_is_a_pipe_or_a_device_is_one_usage_error_not_trained_around(shards, special, what):
    """Mapped, a pipe or a device has no bytes: the run trained on the other shards without a word."""
    shard = Path(shards) / "shard-00001.bin"
    shard.unlink()
    if special == "pipe":
        os.mkfifo(shard)
    else:
        shard.symlink_to("/dev/zero")
    with pytest.raises(UsageError) as err:
        _batches(shards)
    assert str(err.value) == f"--data: {shard} is {what}, expected a regular file"


@pytest.mark.parametrize("cut", [2, 1])  # a whole token short; half a token short
def test_a_shard_shorter_than_its_index_says_is_one_usage_error_not_trained_on_what_is_left(shards, cut):
    """prepare records each shard's token count. A copy cut short (an interrupted sync to FSx)
    was mapped as it was, and the run trained on what was left without a word."""
    meta_path, shard = Path(shards) / "meta.json", Path(shards) / "shard-00001.bin"
    meta = json.loads(meta_path.read_text())
    meta["shard_tokens"] = [5 * (SEQ + 1) + 3, 8 * (SEQ + 1)]
    meta_path.write_text(json.dumps(meta))
    assert _batches(shards).accumulation == 4  # whole, it is read
    shard.write_bytes(shard.read_bytes()[:-cut])
    with pytest.raises(UsageError) as err:
        _batches(shards)
    assert str(err.value) == (f"--data: {shard} holds {16 * (SEQ + 1) - cut:,} bytes, {8 * (SEQ + 1):,} tokens of 2 "
                              f"bytes in {meta_path}: a copy cut short or changed; copy it again, or prepare the "
                              "shards again")


@pytest.mark.parametrize("vocab_size", [None, 50])  # missing, or smaller than the ids in the shards
def test_token_ids_outside_the_models_vocabulary_are_a_usage_error_naming_data_and_the_shard(shards, vocab_size):
    """The shards hold ids up to 103: an embedding of 64 rows would fail at the first step with
    IndexError on the CPU, a device-side assert on a GPU. Checked on the host as windows are cut,
    so the step loop waits for no device."""
    meta = json.loads((Path(shards) / "meta.json").read_text())
    (Path(shards) / "meta.json").write_text(json.dumps({**meta, "vocab_size": vocab_size}))
    batches = RankBatches(TokenDataConfig(shards), SequenceBatchConfig(batch_size=2, seq_len=SEQ), seed=0, rank=0,
                          world_size=1, vocab_size=64, global_batch=8)
    with pytest.raises(UsageError) as err:
        for _ in range(2):  # an epoch: every window, the ones past id 64 among them
            batches.next_step()
    assert re.fullmatch(r"--data: .*/shard-0000[01]\.bin holds token id (6[4-9]|[7-9]\d|10[0-3]), outside the "
                        r"model's vocabulary of 64 \(ids 0 to 63\)", str(err.value)), str(err.value)


def test_looking_ahead_across_an_epoch_changes_neither_the_position_nor_the_batches(shards):
    # 13 windows, 8 samples a step: the look-ahead reads into the next epoch's order every other step.
    ahead, plain = _batches(shards), _batches(shards)
    for _ in range(5):
        assert ahead.check_ahead(range(3)) is False
        assert all(torch.equal(x, y) for a, p in zip(ahead.next_step(), plain.next_step()) for x, y in zip(a, p))
        assert ahead.position == plain.position
        # 4 bytes a window each: an order is held only while training or the look-ahead is in its epoch.
        assert min(ahead._orders) == ahead.position // 13 and len(ahead._orders) <= 2
