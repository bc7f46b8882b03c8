"""trainer.vision's command line and a run in one process; the runs under torchrun with faults
are in test_vision_faults.py, the global batch in test_vision_global_batch.py."""

from __future__ import annotations

import io
import json
import re
import shutil
import subprocess
import sys

import pytest
import torch

pytest.importorskip("torchvision", reason="torchvision is a pinned dependency")

from config.kubernetes import EXIT_NONFINITE  # noqa: E402
from trainer_procs import REPO, job_env  # noqa: E402


def _vision(*argv, timeout=240):
    return subprocess.run([sys.executable, "-m", "trainer.vision", *argv], cwd=REPO, env=job_env(),
                          capture_output=True, text=True, timeout=timeout)


@pytest.mark.parametrize("argv, field", [
    (["--model", "vgg11"], "--model"),
    (["--label-smoothing", "1.5"], "--label-smoothing"),
    (["--data", "/nonexistent"], "--data"),
    (["--init-from", "/nonexistent.pt"], "--init-from"),
    (["--batch-size", "0"], "--batch-size"),
    (["--max-nonfinite-steps", "0"], "--max-nonfinite-steps"),
    (["--decode", "dali"], "--decode"),
    (["--max-bad-images", "-1"], "--max-bad-images"),
    (["--decode", "nvjpeg"], "--decode"),  # synthetic data has no JPEGs (and this machine no GPU)
    (["--decode", "nvimgcodec"], "--decode"),  # synthetic data has no files
    (["--decode", "dali"], "--decode"),
    (["--hw-decoder-load", "1.5"], "--hw-decoder-load"),
    (["--seed", str(2**64)], "--seed"),  # each was an OverflowError traceback
    (["--batch-size", str(10**20)], "--batch-size"),
    # Fewer images than one step trains on: every epoch was 0 steps, and the run exited 0.
    (["--train-samples", "4", "--batch-size", "8", "--epochs", "1"], "--train-samples"),
])
def test_bad_arguments_give_one_line_naming_the_field(argv, field):
    p = _vision(*argv, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and field in lines[0] and "Traceback" not in p.stderr, p.stderr


def test_a_checkpoint_directory_that_cannot_be_created_is_one_line_before_training(tmp_path):
    """The same check as trainer.llm's (trainer.checkpoint.existing_checkpoints)."""
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


@pytest.mark.slow
@pytest.mark.parametrize("decode, says", [("nvimgcodec", "nvImageCodec decodes on this CPU (no GPU here)"),
                                          ("dali", "DALI decodes (the box alone where the JPEG's chroma is not "
                                                   "subsampled, else the whole image) on this CPU (no GPU here)")])
def test_a_gpu_decoder_trains_and_evaluates_on_an_image_folder_and_says_where_it_decodes(image_folder, tmp_path,
                                                                                        decode, says):
    """--decode nvimgcodec and dali end to end on this CPU (nvImageCodec's CPU backend, DALI's CPU
    operators): the loaders read bytes and draw boxes, the training process decodes; every
    validation image is counted. The decoder is not part of a checkpoint: a second run resumes it
    with --decode cpu (a pod restarted after the preset changed), and a third goes back."""
    ck = tmp_path / "ck"
    args = ["--data", str(image_folder), "--image-size", "24", "--batch-size", "8",
            "--workers", "1", "--lr", "0.2", "--warmup-epochs", "0", "--checkpoint-dir", str(ck),
            "--metrics-file", str(ck / "m.jsonl")]
    p = _vision(*args, "--decode", decode, "--epochs", "1")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert says in p.stdout + p.stderr and "warning" not in p.stderr, p.stderr
    p = _vision(*args, "--decode", "cpu", "--epochs", "2")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    assert "nvImageCodec" not in p.stdout + p.stderr and "DALI" not in p.stdout + p.stderr
    p = _vision(*args, "--decode", decode, "--epochs", "3")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = json.loads(p.stdout.split("SUMMARY ", 1)[1].splitlines()[0])
    assert summary["epochs_this_run"] == 1 and summary["resumed_from"] == {"epoch": 2, "image": 0}
    epochs = [r for r in map(json.loads, (ck / "m.jsonl").read_text().splitlines()) if r["kind"] == "epoch"]
    assert [r["val_images"] for r in epochs] == [16, 16, 16]


def test_non_finite_steps_are_skipped_and_counted_and_stop_the_run_after_n_in_a_row(tmp_path):
    """As trainer.llm (trainer/batching.py NonFiniteSteps): a rate of 1e30 overflows the weights
    in step 1's update, every later loss is NaN; those steps are not applied, and the third in a
    row ends the run with EXIT_NONFINITE and one line. The count is read LAG_STEPS (2) steps late,
    as in trainer.llm, so the run stops after step 6, steps 5 and 6 skipped too."""
    metrics = tmp_path / "m.jsonl"
    p = _vision("--image-size", "16", "--batch-size", "16", "--workers", "0", "--train-samples", "256",
                "--val-samples", "32", "--epochs", "1", "--lr", "1e30", "--warmup-epochs", "0", "--log-every", "1",
                "--max-nonfinite-steps", "3", "--metrics-file", str(metrics))
    assert p.returncode == EXIT_NONFINITE, p.stdout[-2000:] + p.stderr[-2000:]
    assert p.stderr.strip().splitlines()[-1] == (
        "error: steps 2 to 4: 3 steps in a row had a non-finite loss or gradient norm and were skipped "
        "(--max-nonfinite-steps 3); stopped after step 6. Lower --lr or check the data; the checkpoints hold the last good weights")
    assert "Traceback" not in p.stderr and "SUMMARY" not in p.stdout
    logged = {r["step"]: r for r in map(json.loads, metrics.read_text().splitlines())}
    assert sorted(logged) == [1, 2, 3, 4, 5, 6]
    assert logged[1]["loss"] > 0 and logged[1]["nonfinite_steps"] == 0
    assert all(logged[s]["loss"] is None and logged[s]["nonfinite_steps"] == 1 for s in (2, 3, 4, 5, 6))


@pytest.mark.slow
@pytest.mark.parametrize("decode", ["cpu", "nvimgcodec", "dali"])
def test_a_few_unreadable_images_are_trained_around_and_more_stop_the_run_in_one_line(tmp_path, decode):
    """Three bad files in train/ (truncated, not an image, a broken PNG): allowed three an epoch, the
    run trains both epochs and evaluates every validation image, naming each file; allowed two, it
    stops in its first epoch with exit 2 and one line naming --max-bad-images, never a traceback.
    With a GPU decoder (here nvImageCodec's CPU backend) the loader finds them from the header and
    the file's end."""
    from test_vision_data import _folder_with_bad_files

    bad = _folder_with_bad_files(tmp_path / "data")
    args = ["--data", str(tmp_path / "data"), "--image-size", "16", "--batch-size", "4", "--workers", "2",
            "--epochs", "2", "--model", "resnet18", "--warmup-epochs", "0", "--decode", decode]
    p = _vision(*args, "--max-bad-images", "3")  # the limit is an epoch's: 3 in each of two is within it
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    for path in bad.values():
        assert p.stderr.count(f"warning: cannot read {path} (") == 2, p.stderr  # once an epoch
        for epoch in (0, 1):  # each names the epoch it is counted in
            assert len(re.findall(rf"warning: cannot read {re.escape(str(path))} \(.*\) in epoch {epoch};",
                                  p.stderr)) == 1, p.stderr
    summary = json.loads(p.stdout.split("SUMMARY ", 1)[1].splitlines()[0])
    assert summary["epochs_this_run"] == 2 and summary["steps"] == 6
    p = _vision(*args, "--max-bad-images", "2")
    assert p.returncode == 2, p.stdout[-3000:] + p.stderr[-3000:]
    assert "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith("error: --max-bad-images: 3 images of epoch 0 could not be "
                                                        "read on rank 0, more than the 2 allowed"), p.stderr


@pytest.mark.slow
@pytest.mark.parametrize("decode", ["nvimgcodec", "dali"])
def test_files_only_the_gpu_decoder_finds_bad_are_stood_in_for_in_training_and_evaluation(tmp_path, decode):
    """A train and a val JPEG that pass every check the loader makes and do not decode (a broken
    Huffman table): with a GPU decoder (here nvImageCodec's CPU backend, or DALI's CPU operators,
    whose failed micro-batch nvImageCodec decodes again) the training process puts another image of
    the micro-batch in each one's place, names each file once an epoch and counts it, so both
    epochs train and evaluate. With --max-bad-images 1 the epoch's second stops the run after
    evaluation: exit 2, one line."""
    from test_vision_data import _folder_with_bad_files
    from test_vision_decode import undecodable_jpeg

    bad = _folder_with_bad_files(tmp_path / "data")
    for path in bad.values():  # only the undecodable kind here
        path.unlink()
    train_bad, val_bad = tmp_path / "data/train/a/3.jpg", tmp_path / "data/val/b/2.jpg"
    for path in (train_bad, val_bad):
        path.write_bytes(undecodable_jpeg(path.read_bytes()))
    args = ["--data", str(tmp_path / "data"), "--image-size", "16", "--batch-size", "4", "--workers", "2",
            "--epochs", "2", "--model", "resnet18", "--warmup-epochs", "0", "--decode", decode]
    p = _vision(*args, "--max-bad-images", "2")
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    # DALI names each file it failed on, and nvImageCodec decodes that micro-batch again.
    for path in (train_bad, val_bad):
        assert p.stderr.count(f"warning: DALI could not decode {path} (") == (2 if decode == "dali" else 0), p.stderr
    for path in (train_bad, val_bad):
        assert p.stderr.count(f"warning: cannot read {path} (OSError: ") == 2, p.stderr  # once an epoch
        for epoch in (0, 1):
            assert len(re.findall(rf"warning: cannot read {re.escape(str(path))} \(.*\) in epoch {epoch};",
                                  p.stderr)) == 1, p.stderr
    # The loader passed them (it would say "the next image"): the decoder found them.
    assert p.stderr.count("another image of its micro-batch is used in its place") == 4, p.stderr
    assert "the next image is used" not in p.stderr
    summary = json.loads(p.stdout.split("SUMMARY ", 1)[1].splitlines()[0])
    assert summary["epochs_this_run"] == 2
    p = _vision(*args, "--max-bad-images", "1")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stdout[-3000:] + p.stderr[-3000:]
    assert p.stderr.strip().splitlines()[-1].startswith("error: --max-bad-images: 2 images of epoch 0 could not be "
                                                        "read on rank 0, more than the 1 allowed"), p.stderr


def test_dropout_masks_differ_between_ranks_and_after_a_resume_and_leave_augmentation_alone():
    """Every rank seeded torch alike at every start: all ranks drew the same dropout and stochastic
    depth masks for their different micro-batches (EfficientNet), and a resume replayed step 1's."""
    from trainer.vision import seed_dropout
    from trainer.vision_data import SeededAugmentation

    dropout = torch.nn.Dropout(0.5)

    def mask(seed, rank, step):
        seed_dropout(seed, rank, step)
        return dropout(torch.ones(4096)) == 0

    first = mask(7, 0, 0)
    assert torch.equal(first, mask(7, 0, 0))  # a run is reproducible from its seed
    assert not torch.equal(first, mask(7, 1, 0))  # rank 1's micro-batch gets its own masks
    assert not torch.equal(first, mask(7, 0, 40))  # a resume at step 40 does not replay step 1's
    assert not torch.equal(mask(7, 0, 40), mask(7, 1, 40))
    # Augmentations (torchvision's transforms draw from the process's generator) come from (seed,
    # epoch, image) alone, whatever the rank's seeding, and leave its dropout stream as it was.
    images = SeededAugmentation(_Draws(), seed=7)
    seed_dropout(7, 0, 0)
    crop = images[(1, 3)]
    assert torch.equal(dropout(torch.ones(4096)) == 0, first)
    seed_dropout(7, 1, 40)
    assert torch.equal(images[(1, 3)], crop)


class _Draws(torch.utils.data.Dataset):
    """An image whose augmentation is a draw from the process's generator."""

    def __len__(self) -> int:
        return 8

    def __getitem__(self, key):
        return torch.rand(4)


def _train_in_process(monkeypatch, ck, *argv, steps: int = 4, batch: int = 8) -> int:
    """trainer.vision's train() in this process, one rank, on synthetic images: `steps` steps of
    `batch`, checkpoints in `ck` (made here, as main makes it)."""
    from trainer import dist as tdist
    from trainer import vision
    from trainer.batching import GLOBAL_BATCH
    from trainer.vision_data import build_datasets

    for name in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):  # tdist.init sets them for its one-process job
        monkeypatch.setenv(name, "0")
        monkeypatch.delenv(name)
    job = vision.parse_job(["--model", "resnet18", "--image-size", "16", "--batch-size", str(batch), "--workers", "0",
                            "--train-samples", str(steps * batch), "--val-samples", str(batch), "--epochs", "1",
                            "--warmup-epochs", "0", "--log-every", "1000", "--checkpoint-dir", str(ck),
                            "--keep-checkpoints", "10", *argv])
    train_set, val_set, classes = build_datasets(job.data, job.synthetic, job.seed)
    ck.mkdir(exist_ok=True)
    rt = tdist.init()
    try:
        return vision.train(job, rt, train_set, val_set, classes,
                            {"workload": "vision", "model": job.model.name, "classes": classes, GLOBAL_BATCH: batch})
    finally:
        tdist.shutdown()


def test_periodic_saves_of_a_run_whose_data_stays_readable_make_no_agreement_of_their_own(tmp_path, monkeypatch):
    """Whether any rank's data was gone (its steps skipped, not to be saved) rides on the step's
    flags, all-reduced on the device anyway; a save due every step asks no rank for more. Before,
    each periodic save made every rank gather every rank's state (all_gather_object: pickling and,
    under NCCL, a copy and a synchronisation) in every vision run. The stop still agrees
    (test_vision_faults.py)."""
    from trainer.checkpoint import list_steps
    from trainer.vision_data import UnreadableImages

    agreements = []
    agree = UnreadableImages.agree_gone
    monkeypatch.setattr(UnreadableImages, "agree_gone", lambda self: agreements.append(1) or agree(self))
    assert _train_in_process(monkeypatch, tmp_path / "ck", "--checkpoint-every", "1") == 0
    assert list_steps(tmp_path / "ck") == [1, 2, 3, 4]
    assert agreements == []


class _WithDropout(torch.nn.Module):
    """A classifier that drops half its features in training, as EfficientNet's head does."""

    def __init__(self, classes: int):
        super().__init__()
        self.features = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, stride=4), torch.nn.Flatten())
        self.drop = torch.nn.Dropout(0.5)
        self.head = torch.nn.LazyLinear(classes)
        self.head(torch.zeros(1, 8 * 4 * 4))

    def forward(self, images):
        return self.head(self.drop(self.features(images)))


def test_a_resumed_run_draws_the_dropout_masks_of_the_uninterrupted_run(tmp_path, monkeypatch):
    """Each step's masks come from (seed, rank, step). Before, the generators were seeded once, at
    the step a run started after, so a run resumed at step 2 drew other masks for steps 3 and 4 than
    the run that went on, and its losses (and weights) parted from it."""
    from trainer import vision
    from trainer.checkpoint import step_dir

    monkeypatch.setattr(vision, "build_classifier", lambda cfg, classes: _WithDropout(classes))
    whole, resumed = tmp_path / "whole", tmp_path / "resumed"
    losses = {}
    for ck in (whole, resumed):
        if ck == resumed:
            resumed.mkdir()
            shutil.copytree(step_dir(whole, 2), step_dir(resumed, 2))
            shutil.copy(whole / "model.json", resumed / "model.json")
        metrics = tmp_path / f"{ck.name}.jsonl"
        assert _train_in_process(monkeypatch, ck, "--checkpoint-every", "2", "--log-every", "1", "--lr", "0.5",
                                 "--metrics-file", str(metrics)) == 0
        records = [json.loads(line) for line in metrics.read_text().splitlines()]
        losses[ck.name] = {r["step"]: r["loss"] for r in records if r["kind"] == "step"}
    assert sorted(losses["resumed"]) == [3, 4]
    assert [losses["resumed"][step] for step in (3, 4)] == [losses["whole"][step] for step in (3, 4)], losses


@pytest.mark.slow
def test_a_validation_micro_batch_the_gpu_decoder_cannot_decode_stops_the_run_with_the_epochs_training_saved(
        make_image_folder, tmp_path):
    """Every val JPEG passes the loader's checks and does not decode: nvImageCodec, decoding in the
    training process, has nothing to stand in with (DecoderStopped). In the training loop that stops
    every rank at an agreed step; in the evaluation the decode ran outside its guard, so the error
    left the epoch's training unsaved (no checkpoint is due before the epoch's end)."""
    from PIL import Image

    from test_vision_decode import undecodable_jpeg
    from trainer.checkpoint import list_steps

    data, ck = tmp_path / "data", tmp_path / "ck"
    make_image_folder(data, train=8, val=2)  # 16 training images: 4 steps of 4; 4 val images: 1 micro-batch
    for path in sorted((data / "val").rglob("*.png")):
        jpeg = io.BytesIO()
        with Image.open(path) as image:
            image.save(jpeg, format="JPEG")
        path.write_bytes(undecodable_jpeg(jpeg.getvalue()))  # decoders read the content, whatever the name
    p = _vision("--data", str(data), "--image-size", "16", "--batch-size", "4", "--workers", "1", "--epochs", "1",
                "--model", "resnet18", "--warmup-epochs", "0", "--decode", "nvimgcodec", "--max-bad-images", "100",
                "--checkpoint-dir", str(ck), "--checkpoint-every", "1000")
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stdout[-3000:] + p.stderr[-3000:]
    line = p.stderr.strip().splitlines()[-1]
    assert line.startswith("error: --data: none of the 4 images of a micro-batch decoded") and \
        "on rank 0 in epoch 0's evaluation" in line and line.endswith(
            "every rank stopped at step 4 with the checkpoint of step 4, the epoch's training (a resume evaluates "
            "it again)"), line
    assert list_steps(ck) == [4] and "epoch 0 done" not in p.stdout
