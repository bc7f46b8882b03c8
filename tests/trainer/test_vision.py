"""trainer.vision's parts: the global data position, the schedule, the data, the models, the CLI,
the plots. The runs under torchrun with faults are in test_vision_faults.py."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

pytest.importorskip("torchvision", reason="torchvision is a pinned dependency")

from trainer import plot as tplot  # noqa: E402
from trainer import vision, vision_data  # noqa: E402
from trainer.cli import UsageError  # noqa: E402
from trainer.vision_data import DataConfig, ElasticSampler, SyntheticImages, build_datasets  # noqa: E402
from trainer_procs import REPO, job_env  # noqa: E402


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


def test_the_rate_scales_with_the_global_batch_warms_up_and_decays_to_zero():
    cfg = vision.OptimConfig(epochs=10, lr_per_256=0.1, warmup_epochs=1)
    epoch = 1000
    assert vision.learning_rate(cfg, 512, epoch, epoch) == pytest.approx(0.2)  # peak = 0.1 * 512/256
    # Warm-up as trainer.optim's step schedule counts it: the first batch gets batch/warm-up of the peak.
    assert vision.learning_rate(cfg, 512, 0, epoch) == pytest.approx(0.2 * 512 / epoch)
    assert vision.learning_rate(cfg, 512, 10 * epoch, epoch) == pytest.approx(0.0, abs=1e-9)
    # The clock is images seen: the same point of the run gives the same shape at another size.
    assert vision.learning_rate(cfg, 256, 5 * epoch, epoch) * 2 == pytest.approx(
        vision.learning_rate(cfg, 512, 5 * epoch, epoch))


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
    train, val, classes = build_datasets(DataConfig(source=str(image_folder), image_size=24))
    assert classes == 2 and train.classes == ["cat", "dog"]
    image, label = train[0]
    assert image.shape == (3, 24, 24) and label in (0, 1)
    assert val[0][0].shape == (3, 24, 24)


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    from PIL import Image
    root = tmp_path_factory.mktemp("imagefolder")
    g = torch.Generator().manual_seed(0)
    for split, count in (("train", 24), ("val", 8)):
        for label, name in enumerate(("cat", "dog")):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(count):
                base = torch.full((30, 40, 3), 60 + 130 * label, dtype=torch.float32)
                pixels = (base + 30 * torch.randn(30, 40, 3, generator=g)).clamp(0, 255).to(torch.uint8)
                Image.fromarray(pixels.numpy()).save(folder / f"{i}.png")
    return root


@pytest.mark.parametrize("name", vision.MODELS)
def test_the_models_come_from_torchvision_with_random_weights_and_the_class_count(name):
    model = vision.build_model(vision.ModelSpec(name), classes=7)
    head = [m for m in model.modules() if isinstance(m, torch.nn.Linear)][-1]
    assert head.out_features == 7


def test_init_from_loads_a_local_state_dict_and_refuses_another_models_in_one_line(tmp_path):
    source = vision.build_model(vision.ModelSpec("resnet18"), classes=5)
    torch.save(source.state_dict(), tmp_path / "w.pt")
    loaded = vision.build_model(vision.ModelSpec("resnet18", str(tmp_path / "w.pt")), classes=5)
    assert torch.equal(loaded.fc.weight, source.fc.weight)
    with pytest.raises(UsageError, match="--init-from") as err:
        vision.build_model(vision.ModelSpec("resnet18", str(tmp_path / "w.pt")), classes=9)
    assert "\n" not in str(err.value)


def _vision(*argv, timeout=240):
    return subprocess.run([sys.executable, "-m", "trainer.vision", *argv], cwd=REPO, env=job_env(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("argv, field", [
    (["--model", "vgg11"], "--model"),
    (["--label-smoothing", "1.5"], "--label-smoothing"),
    (["--data", "/nonexistent"], "--data"),
    (["--init-from", "/nonexistent.pt"], "--init-from"),
    (["--batch-size", "0"], "--batch-size"),
])
def test_bad_arguments_give_one_line_naming_the_field(argv, field):
    p = _vision(*argv, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in p.stderr, p.stderr


def test_a_checkpoint_directory_that_cannot_be_created_is_one_line_before_training(tmp_path):
    """The same check as trainer.llm's (trainer.checkpoint.open_directory)."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    p = _vision("--checkpoint-dir", str(blocker / "ck"), timeout=120)
    assert p.returncode == 2
    assert p.stderr.strip() == f"error: --checkpoint-dir: cannot create {blocker / 'ck'}: {blocker} is a file, not a folder"


@pytest.mark.slow
def test_one_process_trains_on_an_image_folder_and_refuses_a_checkpoint_of_another_model(image_folder, tmp_path):
    ck = tmp_path / "ck"
    args = ["--data", str(image_folder), "--image-size", "24", "--batch-size", "8", "--workers", "1", "--epochs", "2",
            "--lr", "0.2", "--warmup-epochs", "0", "--checkpoint-dir", str(ck), "--metrics-file", str(ck / "m.jsonl"),
            "--log-every", "2"]
    p = _vision(*args)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = json.loads(p.stdout.split("SUMMARY ", 1)[1].splitlines()[0])
    assert summary["epochs_this_run"] == 2 and summary["world_size"] == 1
    epochs = [r for r in map(json.loads, (ck / "m.jsonl").read_text().splitlines()) if r["kind"] == "epoch"]
    assert [r["val_images"] for r in epochs] == [16, 16]  # every validation image once
    assert {"images_per_sec", "images_per_sec_per_rank", "epoch_time_s", "data_wait_fraction", "top1",
            "top5"} <= epochs[0].keys()
    p = _vision(*args[:-6], "--model", "resnet50", "--checkpoint-dir", str(ck))
    assert p.returncode == 2 and "--checkpoint-dir" in p.stderr and "Traceback" not in p.stderr, p.stderr


def _metrics_file(path, world_size, rates):
    lines = [{"kind": "step", "step": 5, "epoch": 0, "loss": 2.0, "lr": 0.1, "images_per_sec": rates[0],
              "data_wait_ms": 3.0, "world_size": world_size}]
    for epoch, rate in enumerate(rates):
        lines.append({"kind": "epoch", "step": 10 * (epoch + 1), "epoch": epoch, "loss": 1.0, "epoch_time_s": 100 / rate,
                      "images_per_sec": rate, "world_size": world_size, "top1": 0.5, "top5": 0.9})
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))
    return path


def test_the_scaling_table_measures_efficiency_against_linear_from_the_smallest_run(tmp_path):
    one = _metrics_file(tmp_path / "one.jsonl", 1, [50.0, 100.0, 100.0])  # the first epoch is warm-up
    two = _metrics_file(tmp_path / "two.jsonl", 2, [90.0, 150.0, 150.0])
    table = tplot.scaling_table([tplot.run_point(two), tplot.run_point(one)])
    assert [(r["devices"], r["images_per_sec"]) for r in table] == [(1, 100.0), (2, 150.0)]
    assert table[1]["ideal_images_per_sec"] == 200.0 and table[1]["efficiency"] == pytest.approx(0.75)
    out = tmp_path / "scaling.png"
    p = subprocess.run([sys.executable, "-m", "trainer.plot", "scaling", str(one), str(two), "-o", str(out)],
                       cwd=REPO, env=job_env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "  2 devices |     150.0 images/s" in p.stdout and "efficiency 75%" in p.stdout
    assert out.stat().st_size > 10_000


def test_scaling_refuses_runs_without_epoch_lines_in_one_line(tmp_path):
    bad = tmp_path / "llm.jsonl"
    bad.write_text(json.dumps({"step": 1, "loss": 2.0}) + "\n")
    p = subprocess.run([sys.executable, "-m", "trainer.plot", "scaling", str(bad)], cwd=REPO, env=job_env(),
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and "RUN" in p.stderr, p.stderr


def test_the_curves_of_a_vision_run_include_accuracy(tmp_path):
    records = tplot.read_metrics(_metrics_file(tmp_path / "m.jsonl", 2, [90.0, 150.0]))
    assert [r.get("kind") for r in records] == ["step", "epoch", "epoch"]
    tplot.plot(records, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 10_000


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
    cfg = DataConfig(batch_size=4, workers=workers, seed=5)
    sampler = ElasticSampler(_Draws(), num_replicas=world, rank=rank, global_batch=16, seed=5)
    sampler.set_position(epoch, 0)
    torch.manual_seed(5)  # as every rank of trainer.vision does before it builds its loaders
    out = {}
    for draws, indices in vision_data.train_loader(_Draws(), sampler, cfg, rank=rank, pin=False):
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
