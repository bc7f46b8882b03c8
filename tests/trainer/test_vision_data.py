"""trainer.vision_data: the global data position (a resume on another world size covers the rest
of the epoch once), the synthetic images and ImageFolder data, the micro-batches every world size
cuts alike, and augmentations seeded by the image and epoch."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

pytest.importorskip("torchvision", reason="torchvision is a pinned dependency")

from config.workloads.vision import ImageDataConfig, SyntheticImagesConfig  # noqa: E402
from trainer import vision_data  # noqa: E402
from trainer.torchvision_compat import import_torchvision  # noqa: E402
from trainer.cli import UsageError  # noqa: E402
from trainer.vision_data import ElasticSampler, SyntheticImages, build_datasets  # noqa: E402


def _consumed(n: int, world: int, batch: int, epoch: int, start: int, steps: int | None = None) -> list[list[int]]:
    """Per rank, the sample indices of the first `steps` steps (all when None)."""
    data = list(range(n))
    out = []
    for rank in range(world):
        s = ElasticSampler(data, num_replicas=world, rank=rank, global_batch=batch * world, seed=7)
        s.set_position(epoch, start)
        indices = [index for key_epoch, index in s if key_epoch == epoch]
        out.append(indices if steps is None else indices[:steps * batch])
    return out


def test_an_epoch_resumed_on_another_world_size_covers_the_rest_exactly_once():
    n, batch = 200, 4
    # 5 steps on 2 ranks consume the first 5*4*2 = 40 positions of the epoch's order ...
    before = _consumed(n, 2, batch, epoch=3, start=0, steps=5)
    # ... and 3 ranks take it from global image 40, whatever the first run's world size was.
    after = _consumed(n, 3, batch, epoch=3, start=40)
    seen = [i for rank in before + after for i in rank]
    assert len(seen) == len(set(seen)), "no image twice in one epoch"
    full_steps = (n - 40) // (batch * 3)
    assert all(len(rank) == full_steps * batch for rank in after)  # equal steps on every rank
    assert len(set(seen)) == 40 + full_steps * batch * 3  # only the tail that fills no step is dropped
    # The order is the epoch's own, whatever the world size: one rank with the same global batch
    # consumes the same 40 images in its first 5 steps.
    assert sorted(before[0] + before[1]) == sorted(_consumed(n, 1, batch * 2, epoch=3, start=0, steps=5)[0])


def test_each_epoch_is_a_new_shuffle_the_same_on_every_rank():
    a, b = _consumed(64, 2, 4, epoch=0, start=0), _consumed(64, 2, 4, epoch=1, start=0)
    assert a != b and sorted(a[0] + a[1]) == sorted(b[0] + b[1]) == list(range(64))
    assert _consumed(64, 2, 4, epoch=1, start=0) == b


def test_synthetic_images_are_deterministic_and_spread_over_the_classes():
    data = SyntheticImages(400, 10, 16, seed=3)
    x0, y0 = data[5]
    x1, y1 = SyntheticImages(400, 10, 16, seed=3)[5]
    assert torch.equal(x0, x1) and y0 == y1 and x0.shape == (3, 16, 16)
    counts = torch.bincount(torch.tensor([data[i][1] for i in range(400)]), minlength=10)
    assert (counts > 20).all()
    # Learnable: the class pattern explains most of an image (nearest pattern finds the class).
    val = SyntheticImages(200, 10, 16, seed=3, split_offset=10**9, flip=False)
    hits = sum(int(((val.patterns - val[i][0]) ** 2).flatten(1).sum(1).argmin()) == val[i][1] for i in range(200))
    assert hits > 150


def test_an_image_folder_gives_its_classes_and_the_standard_transforms(image_folder):
    data = ImageDataConfig(source=str(image_folder), image_size=24)
    train, val, classes = build_datasets(data, SyntheticImagesConfig(), seed=0)
    assert classes == 2 and train.classes == ["cat", "dog"]
    image, label = train[0]
    assert image.shape == (3, 24, 24) and label in (0, 1)
    assert val[0][0].shape == (3, 24, 24)


def test_every_world_size_cuts_the_same_micro_batches_from_a_global_batch():
    def micro_batches(world: int, micro: int = 4) -> list[tuple[int, ...]]:
        out = []
        for rank in range(world):
            s = ElasticSampler(list(range(64)), num_replicas=world, rank=rank, global_batch=16, seed=3)
            s.set_position(2, 16)
            indices = [index for _, index in s]
            out += [tuple(indices[i:i + micro]) for i in range(0, len(indices), micro)]
        return sorted(out)
    assert micro_batches(1) == micro_batches(2) == micro_batches(4) and len(micro_batches(1)) == 12


class _Draws(torch.utils.data.Dataset):
    """An 'augmentation' that is nothing but the worker's random draws, and the image index."""

    def __len__(self) -> int:
        return 32

    def __getitem__(self, index: int):
        return torch.rand(3), index


def _draws(world: int, rank: int, epoch: int, workers: int) -> dict[int, torch.Tensor]:
    sampler = ElasticSampler(_Draws(), num_replicas=world, rank=rank, global_batch=16, seed=5)
    sampler.set_position(epoch, 0)
    torch.manual_seed(5)  # as every rank of trainer.vision does before it builds its loaders
    out = {}
    for draws, indices in vision_data.train_loader(_Draws(), sampler, ImageDataConfig(workers=workers), batch_size=4,
                                                   seed=5, rank=rank, pin=False,
                                                   unreadable=vision_data.UnreadableImages(0)):
        out.update(zip(indices.tolist(), draws))
    return out


def test_random_augmentations_differ_between_ranks_and_follow_the_image_and_epoch_not_the_rank():
    rank0, rank1 = _draws(2, 0, epoch=0, workers=1), _draws(2, 1, epoch=0, workers=1)
    # Each rank's n-th image is augmented differently (before, each rank's workers drew the same).
    assert all(not torch.equal(a, b) for a, b in zip(rank0.values(), rank1.values()))
    # An image's augmentation depends on the seed, the epoch and the image: not on the world size,
    # the rank that reads it or the number of loader workers, so a resume anywhere repeats it.
    one_rank = _draws(1, 0, epoch=0, workers=0)
    assert one_rank.keys() == rank0.keys() | rank1.keys()
    assert all(torch.equal(one_rank[i], {**rank0, **rank1}[i]) for i in one_rank)
    next_epoch = _draws(1, 0, epoch=1, workers=0)
    assert all(not torch.equal(one_rank[i], next_epoch[i]) for i in one_rank)


def _fp32_pipelines(image_size: int):
    """The loader's transforms before the uint8 path: ToTensor and Normalize in fp32 on the CPU."""
    T = import_torchvision().transforms
    normalize = T.Normalize(vision_data.MEAN, vision_data.STD)
    return (T.Compose([T.RandomResizedCrop(image_size), T.RandomHorizontalFlip(), T.ToTensor(), normalize]),
            T.Compose([T.Resize(math.ceil(image_size / 0.875)), T.CenterCrop(image_size), T.ToTensor(), normalize]))


@pytest.fixture(scope="module")
def jpeg(tmp_path_factory) -> Path:
    from PIL import Image
    g = torch.Generator().manual_seed(1)
    pixels = (torch.rand(90, 120, 3, generator=g) * 255).to(torch.uint8)
    path = tmp_path_factory.mktemp("jpeg") / "a.jpg"
    Image.fromarray(pixels.numpy()).save(path, quality=90)
    return path


def test_the_uint8_path_gives_the_model_the_values_the_fp32_path_gave_for_the_same_image_and_crop(jpeg):
    from PIL import Image
    new_train, new_val = vision_data.transforms(32)
    old_train, old_val = _fp32_pipelines(32)
    device_images = vision_data.DeviceImages(torch.device("cpu"))
    with Image.open(jpeg) as f:
        image = f.convert("RGB")
    for seed in range(6):  # crops and flips differ by seed; each pair must agree
        for new, old in ((new_train, old_train), (new_val, old_val)):
            torch.manual_seed(seed)
            loaded = new(image)
            torch.manual_seed(seed)
            expected = old(image)
            assert loaded.dtype == torch.uint8 and loaded.shape == (3, 32, 32)  # a quarter of fp32's bytes
            batch, labels = device_images(loaded[None], torch.tensor([0]))
            assert batch.dtype == torch.float32 and labels.tolist() == [0]
            # The same operations in the same order: equal to float rounding, far inside one uint8 level.
            torch.testing.assert_close(batch[0], expected, atol=1e-6, rtol=0)
    # Synthetic batches are float already: they pass unchanged.
    x = torch.randn(2, 3, 8, 8)
    assert device_images(x, torch.tensor([0, 1]))[0] is x


# --- unreadable images (--max-bad-images) --------------------------------------------------------


def _folder_with_bad_files(root: Path) -> dict[str, Path]:
    """An ImageFolder of 2 classes x 6 JPEGs per split, with a truncated JPEG, a file that is no image
    and a PNG whose chunk is broken in train/; the bad files by kind."""
    import io

    from PIL import Image
    g = torch.Generator().manual_seed(3)
    for split in ("train", "val"):
        for c in ("a", "b"):
            (root / split / c).mkdir(parents=True)
            for i in range(6):
                pixels = torch.randint(0, 256, (30, 40, 3), dtype=torch.uint8, generator=g).numpy()
                Image.fromarray(pixels).save(root / split / c / f"{i}.jpg", quality=90)
    bad = {"truncated": root / "train" / "a" / "2.jpg", "not an image": root / "train" / "b" / "4.jpg",
           "broken png": root / "train" / "b" / "1.jpg"}
    data = bad["truncated"].read_bytes()
    bad["truncated"].write_bytes(data[: len(data) // 3])
    bad["not an image"].write_bytes(b"<html>404 Not Found</html>" * 8)
    out = io.BytesIO()
    Image.new("RGB", (40, 30)).save(out, format="PNG")
    png = bytearray(out.getvalue())
    png[20:24] = b"\xff\xff\xff\xff"  # the IHDR chunk's width: its CRC no longer matches
    bad["broken png"].write_bytes(bytes(png))
    return bad


@pytest.mark.parametrize("workers", [0, 2])
def test_an_unreadable_image_is_replaced_by_the_next_counted_and_named(tmp_path, capfd, workers):
    bad = _folder_with_bad_files(tmp_path)
    data = ImageDataConfig(source=str(tmp_path), image_size=16, workers=workers)
    train, val, _ = build_datasets(data, SyntheticImagesConfig(), seed=0)
    unreadable = vision_data.UnreadableImages(limit=3)
    sampler = ElasticSampler(train, num_replicas=1, rank=0, global_batch=4, seed=0)
    sampler.set_position(0, 0)
    unreadable.reading(0)
    unreadable.epoch_start(0)
    loader = vision_data.train_loader(train, sampler, data, batch_size=4, seed=0, rank=0, pin=False,
                                      unreadable=unreadable)
    labels = torch.cat([batch[1] for batch in loader])
    assert len(labels) == 12  # every position of the epoch filled
    assert unreadable.this_epoch() == 3
    assert unreadable.problem() is None  # 3 of 3 allowed
    err = capfd.readouterr().err
    for path in bad.values():
        assert f"warning: cannot read {path} (" in err, err
    # The replacement is the next image in the dataset's order: for 2.jpg of class a, 3.jpg of a.
    index = [p for p, _ in train.samples].index(str(bad["truncated"]))
    torch.manual_seed(7)  # the crop's draws, as SeededAugmentation seeds them
    got = vision_data.Substitutes(train, vision_data.UnreadableImages(0))[index]
    torch.manual_seed(7)
    expected = train[index + 1]
    assert torch.equal(got[0], expected[0]) and got[1] == expected[1] == 0
    unreadable.met("f.jpg", OSError("broken"), "the next image")
    assert unreadable.problem().startswith("4 images of epoch 0 could not be read on rank 0, more than the 3 allowed")
    assert unreadable.over_limit()
    unreadable.reading(0)
    assert unreadable.over_limit()  # kept until the ranks stop on it
    with pytest.raises(UsageError, match=r"^--max-bad-images: 4 images of epoch 0 could not be read on rank 0, "
                                         r"more than the 3 allowed"):
        unreadable.raise_agreed_problem()  # one process: no group to agree in
    unreadable.reading(1)  # a new epoch counts afresh
    unreadable.epoch_start(1)
    assert unreadable.this_epoch() == 0


def test_the_next_epochs_reads_during_this_ones_evaluation_count_in_the_next_epoch(tmp_path, capfd):
    """trainer.vision starts the next epoch's loader processes before it evaluates: what they meet
    belongs to the next epoch's count, what the evaluation meets to this one's, and neither is
    lost or counted twice."""
    bad = _folder_with_bad_files(tmp_path)
    data = ImageDataConfig(source=str(tmp_path), image_size=16, workers=2)
    train, val, _ = build_datasets(data, SyntheticImagesConfig(), seed=0)
    unreadable = vision_data.UnreadableImages(limit=3)
    sampler = ElasticSampler(train, num_replicas=1, rank=0, global_batch=4, seed=0)
    loader = vision_data.train_loader(train, sampler, data, batch_size=4, seed=0, rank=0, pin=False,
                                      unreadable=unreadable)
    sampler.set_position(0, 0)
    unreadable.reading(0)
    unreadable.epoch_start(0)
    assert len(list(loader)) == 3 and unreadable.this_epoch() == 3

    sampler.set_position(1, 0)  # epoch 1's loader reads all of it while epoch 0 evaluates
    unreadable.reading(1)
    epoch_1 = iter(loader)
    assert len([next(epoch_1) for _ in range(3)]) == 3
    assert unreadable.this_epoch() == 3  # epoch 0's, as it was
    unreadable.met("val/b/1.jpg", OSError("broken"), "the next image")  # its evaluation's
    assert unreadable.this_epoch() == 4
    assert unreadable.problem().startswith("4 images of epoch 0 could not")
    unreadable.epoch_start(1)
    assert unreadable.this_epoch() == 3  # epoch 1's three, read before it started
    assert unreadable.problem() is None
    assert capfd.readouterr().err.count("warning: cannot read") == 3 + 3 + 1
    assert len(bad) == 3


def test_a_folder_that_cannot_be_read_at_all_raises_the_error_not_a_substitute(tmp_path):
    _folder_with_bad_files(tmp_path)
    data = ImageDataConfig(source=str(tmp_path), image_size=16, workers=0)
    train, _, _ = build_datasets(data, SyntheticImagesConfig(), seed=0)
    for path, _ in train.samples:  # the volume is gone
        Path(path).unlink()
    unreadable = vision_data.UnreadableImages(limit=1000)
    with pytest.raises(vision_data.FolderUnreadable) as raised:
        vision_data.Substitutes(train, unreadable)[0]
    assert isinstance(raised.value.__cause__, FileNotFoundError)
    assert unreadable.this_epoch() == vision_data.IN_A_ROW - 1


def test_a_folder_that_cannot_be_read_at_all_reaches_the_training_process_as_itself_from_a_loader_process(tmp_path):
    """trainer.vision turns FolderUnreadable into one line naming --data; raised in a loader
    process, torch re-raises it in the training process, as its own type only where it can be
    built from one argument (a UsageError would come back as a RuntimeError)."""
    _folder_with_bad_files(tmp_path)
    data = ImageDataConfig(source=str(tmp_path), image_size=16, workers=1)
    train, _, _ = build_datasets(data, SyntheticImagesConfig(), seed=0)
    for path, _ in train.samples:
        Path(path).unlink()
    loader = torch.utils.data.DataLoader(vision_data.Substitutes(train, vision_data.UnreadableImages(limit=1000)),
                                         batch_size=2, num_workers=1)
    with pytest.raises(vision_data.FolderUnreadable):
        next(iter(loader))


@pytest.mark.parametrize("decode", ["cpu", "nvjpeg"])  # PIL opens the file; a GPU decoder's loader reads it whole
@pytest.mark.parametrize("kind", ["named pipe", "device", "huge"])
def test_a_file_that_cannot_be_read_in_bounded_time_and_memory_is_an_unreadable_image_named_and_replaced(
        tmp_path, capfd, decode, kind):
    """Anyone may write to the shared volume: a named pipe called 2.jpg held the loader in open()
    for ever (the run hung), and a link to /dev/zero or a file of many GB was read whole by a
    GPU decoder's loader (MemoryError, or the OOM killer at every restart)."""
    import os
    import threading

    _folder_with_bad_files(tmp_path)
    bad = tmp_path / "train" / "a" / "2.jpg"
    bad.unlink()
    writer = threading.Thread(daemon=True)
    if kind == "named pipe":
        os.mkfifo(bad)
        # Opens the other end once a reader opens it, and closes it: a reader that opens the pipe
        # then reads an empty file instead of hanging this test.
        writer = threading.Thread(target=lambda: os.close(os.open(bad, os.O_WRONLY)), daemon=True)
        writer.start()
    elif kind == "device":
        bad.symlink_to("/dev/zero")
    else:
        with open(bad, "wb") as f:
            f.truncate(1 << 30)  # past the bound, and sparse: no disk
    data = ImageDataConfig(source=str(tmp_path), image_size=16, workers=0, decode=decode)
    train, _, _ = build_datasets(data, SyntheticImagesConfig(), seed=0)
    index = [p for p, _ in train.samples].index(str(bad))
    try:
        got = vision_data.Substitutes(train, vision_data.UnreadableImages(limit=1000))[index]
        opened = not writer.is_alive() and kind == "named pipe"
    finally:
        if writer.is_alive():  # nothing opened the pipe: release the writer
            os.close(os.open(bad, os.O_RDONLY | os.O_NONBLOCK))
    assert got[1] == train[index + 1][1]  # the next image stands in
    warning = next(line for line in capfd.readouterr().err.splitlines() if str(bad) in line)
    what = {"named pipe": "is a named pipe", "device": "is a character device", "huge": "is larger than"}[kind]
    if decode != "cpu" or kind != "huge":  # PIL reads a huge file's header only, and says it is no image
        assert what in warning, warning
    assert not opened


def _nested_folder(root: Path) -> Path:
    """Two classes per split, each with images beside and inside a subfolder."""
    from PIL import Image
    for split in ("train", "val"):
        for name in ("cat", "dog"):
            for folder in (root / split / name, root / split / name / "more", root / split / name / "more" / "deep"):
                folder.mkdir(parents=True, exist_ok=True)
                for i in (2, 10, 1):
                    Image.new("RGB", (20, 20)).save(folder / f"{i}.png")
    return root


def test_an_image_folder_lists_the_samples_torchvision_lists_in_its_order(tmp_path):
    root = _nested_folder(tmp_path)
    train, val, _ = build_datasets(ImageDataConfig(source=str(root), image_size=16), SyntheticImagesConfig(), seed=0)
    datasets = import_torchvision().datasets
    for split, ours in (("train", train), ("val", val)):
        assert ours.samples == datasets.ImageFolder(root / split).samples and len(ours.samples) == 18


@pytest.mark.parametrize("where", ["cat", "cat/more"])
def test_a_folder_below_a_split_this_user_may_not_list_is_a_usage_error_naming_data_and_the_folder(tmp_path, where):
    """torchvision's os.walk passed over a subfolder without a word (its images were silently not
    trained on), and said 'Found no valid file for the classes cat' for a class folder."""
    from cli_sweep import denied_as_a_user

    root = _nested_folder(tmp_path)
    (root / "train" / where).chmod(0)
    with denied_as_a_user(), pytest.raises(UsageError) as err:
        build_datasets(ImageDataConfig(source=str(root), image_size=16), SyntheticImagesConfig(), seed=0)
    assert str(err.value) == f"--data: cannot list {root / 'train' / where} (Permission denied)"
