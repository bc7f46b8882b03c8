"""`python -m trainer.data imagenet --reencode` (trainer/imagenet_reencode.py): larger images scaled
to the short side, the aspect ratio kept; small ones re-encoded only where cheaper to decode; odd
inputs made RGB JPEG; the settings recorded and never mixed; a killed run leaves whole files and
its pool dies with it; the copy trains through the real vision trainer."""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin

from ops import proc

from trainer import imagenet, imagenet_reencode
from trainer.cli import UsageError
from trainer.imagenet_reencode import Settings
from ilsvrc_tiny import write_tiny_ilsvrc

REPO = Path(__file__).resolve().parents[2]
IMAGES = "ILSVRC/Data/CLS-LOC"


def run_cli(*args: str, timeout: int = 180) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainer.data", "imagenet", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=timeout)


def photo(width: int, height: int, seed: int = 0, mode: str = "RGB") -> Image.Image:
    """Smooth colour plus noise: compresses like a photograph."""
    rng = np.random.default_rng(seed)
    low = Image.fromarray((rng.random((4, 5, 3)) * 200 + 25).astype(np.uint8)).resize((width, height), Image.BILINEAR)
    pixels = np.asarray(low, dtype=np.float32) + 6 * rng.standard_normal((height, width, 3), dtype=np.float32)
    return Image.fromarray(pixels.clip(0, 255).astype(np.uint8)).convert(mode)


def release_with(root: Path, sizes: list[tuple[int, int]], classes: int = 3) -> list[Path]:
    """The tiny ILSVRC layout with its placeholders replaced by ImageNet-like JPEGs (q96, 4:4:4) of
    the given sizes in turn; the sources, in the order the tool places them."""
    write_tiny_ilsvrc(root, classes=classes, train_per_class=2, val_per_class=2)
    files = sorted((root / IMAGES / "train").rglob("*.JPEG")) + sorted((root / IMAGES / "val").glob("*.JPEG"))
    for i, path in enumerate(files):
        photo(*sizes[i % len(sizes)], seed=i).save(path, format="JPEG", quality=96, subsampling=0)
    return files


def output_of(out: Path, source: Path) -> Path:
    [found] = out.rglob(source.name)
    return found


def test_larger_images_get_the_short_side_and_keep_their_aspect_ratio_smaller_ones_stay_their_size(tmp_path):
    sizes = [(640, 480), (300, 500), (1200, 400), (200, 150)]
    files = release_with(tmp_path / "src", sizes)
    out = tmp_path / "out"
    report = imagenet.rearrange(tmp_path / "src", out, Settings(short_side=256, jpeg_quality=90), workers=2)
    assert report.reencoded == 12 and report.linked + report.copied == 0
    expected = {(640, 480): (341, 256), (300, 500): (256, 427), (1200, 400): (768, 256), (200, 150): (200, 150)}
    for i, source in enumerate(files):
        with Image.open(output_of(out, source)) as image:
            assert (image.format, image.mode) == ("JPEG", "RGB")
            assert image.size == expected[sizes[i % 4]]
            assert JpegImagePlugin.get_sampling(image) == 2  # 4:2:0
        # The small q96 4:4:4 source re-encoded too: 4:2:0 at quality 90 is fewer bytes to decode.
        assert output_of(out, source).stat().st_size < source.stat().st_size
    assert json.loads((out / "reencode.json").read_text()) == {"short_side": 256, "jpeg_quality": 90,
                                                              "subsampling": "4:2:0", "format": 1}


def test_a_small_image_already_cheap_to_decode_is_linked_not_encoded_again(tmp_path):
    """4:2:0 at quality 75 and within the bound: a re-encode at 90 would be more bytes, a second
    generation of loss for nothing."""
    files = release_with(tmp_path / "src", [(200, 150)], classes=1)
    for i, path in enumerate(files):
        photo(200, 150, seed=i).save(path, format="JPEG", quality=75, subsampling=2)
    report = imagenet.rearrange(tmp_path / "src", tmp_path / "out", Settings(short_side=256, jpeg_quality=90), 1)
    assert (report.linked, report.reencoded) == (4, 0)
    assert all(os.path.samefile(f, output_of(tmp_path / "out", f)) for f in files)


def test_cmyk_grayscale_and_png_content_become_rgb_jpeg_and_a_truncated_image_is_one_line_naming_it(tmp_path):
    files = release_with(tmp_path / "src", [(300, 300)], classes=2)
    photo(400, 300, mode="CMYK").save(files[0], format="JPEG", quality=90)
    photo(200, 150, mode="L").save(files[1], format="JPEG", quality=90)
    photo(500, 300).save(files[2], format="PNG")  # as ImageNet's one PNG under a .JPEG name
    out = tmp_path / "out"
    p = run_cli("--src", str(tmp_path / "src"), "--out", str(out), "--reencode", "--short-side", "256",
                "--workers", "1")
    assert p.returncode == 0, p.stderr
    for source, size in zip(files[:3], [(341, 256), (200, 150), (427, 256)]):
        with Image.open(output_of(out, source)) as image:
            assert (image.format, image.mode, image.size) == ("JPEG", "RGB", size)
            image.load()
    # A truncated JPEG would fail the training loader mid-epoch: the run stops, naming it.
    whole = files[3].read_bytes()
    files[3].write_bytes(whole[:len(whole) // 2])
    p = run_cli("--src", str(tmp_path / "src"), "--out", str(tmp_path / "out2"), "--reencode", "--short-side", "256",
                "--workers", "1")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    assert p.stderr.strip().splitlines()[-1].startswith(f"error: --src: cannot decode {files[3]}: image file is truncated")
    assert not list((tmp_path / "out2").rglob(".*.partial"))


def test_other_settings_a_plain_run_or_a_plain_copy_are_refused_so_a_copy_never_mixes_encodings(tmp_path):
    release_with(tmp_path / "src", [(300, 200)], classes=1)
    src, out = str(tmp_path / "src"), str(tmp_path / "out")
    assert run_cli("--src", src, "--out", out, "--reencode", "--workers", "1").returncode == 0
    for extra, message in [
        (["--reencode", "--jpeg-quality", "80"], "error: --out: {out} was re-encoded with short side 320, quality 90, "
                                                 "4:2:0 (format 1), not short side 320, quality 80, 4:2:0 (format 1); "
                                                 "pass those settings or choose another --out"),
        ([], "error: --out: {out} holds a re-encoded copy (short side 320, quality 90, 4:2:0, reencode.json); add "
             "--reencode with those settings, or choose another --out"),
    ]:
        p = run_cli("--src", src, "--out", out, *extra)
        assert (p.returncode, p.stderr.strip()) == (2, message.format(out=out))
    # The same settings again: everything is already in place.
    p = run_cli("--src", src, "--out", out, "--reencode", "--workers", "1")
    assert p.returncode == 0 and "0 linked, 0 copied, 4 already in place" in p.stdout, p.stdout + p.stderr
    plain = str(tmp_path / "plain")
    assert run_cli("--src", src, "--out", plain).returncode == 0
    p = run_cli("--src", src, "--out", plain, "--reencode")
    assert (p.returncode, p.stderr.strip()) == (2, f"error: --out: {plain} already holds images placed without "
                                                   "--reencode; choose another --out")


@pytest.mark.parametrize("args, line", [
    (["--reencode", "--short-side", "200"], "error: --short-side: 200 is below 256, the evaluation resize of "
     "resnet50-imagenet (224-px crops / 0.875): its images would be enlarged; use 256 to 4096"),
    (["--reencode", "--short-side", "600", "--preset", "efficientnetb7-imagenet"], "error: --short-side: 600 is "
     "below 686, the evaluation resize of efficientnetb7-imagenet (600-px crops / 0.875): its images would be "
     "enlarged; use 686 to 4096"),
    (["--reencode", "--short-side", "5000"], "error: --short-side: must be 256 to 4096 for resnet50-imagenet, got 5000"),
    (["--reencode", "--jpeg-quality", "99"], "error: --jpeg-quality: must be 75 to 95 (JPEG quality), got 99"),
    (["--reencode", "--jpeg-quality", "50"], "error: --jpeg-quality: must be 75 to 95 (JPEG quality), got 50"),
    (["--reencode", "--workers", "0"], "error: --workers: must be 1 to 256, got 0"),
    (["--short-side", "320"], "error: --short-side: only applies with --reencode"),
    (["--jpeg-quality", "90"], "error: --jpeg-quality: only applies with --reencode"),
    (["--preset", "efficientnetb7-imagenet"], "error: --preset: only applies with --reencode"),
    (["--reencode", "--preset", "vision-tiny"], "error: --preset: invalid choice: 'vision-tiny' (choose from "
     "'efficientnetb7-imagenet', 'resnet50-imagenet')"),
])
def test_bad_reencode_options_are_one_line_and_exit_2_before_anything_is_read(tmp_path, args, line):
    p = run_cli("--src", str(tmp_path / "absent"), "--out", str(tmp_path / "out"), *args, timeout=120)
    assert (p.returncode, p.stderr.strip()) == (2, line)
    assert not (tmp_path / "out").exists()


def _children(pid: int) -> list[int]:
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(x) for x in text.split()]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a FIFO and pidfd_open hold the run at one image")
def test_a_killed_run_leaves_whole_images_its_pool_dies_with_it_and_the_rerun_finishes_the_rest(tmp_path):
    files = release_with(tmp_path / "src", [(400, 300)])
    # The last training image is a FIFO: opening it holds the one worker there, every image before
    # it already written, until this test has killed the run.
    at = len(list((tmp_path / "src" / IMAGES / "train").rglob("*.JPEG"))) - 1
    blocker = files[at]
    blocker.unlink()
    os.mkfifo(blocker)
    out = tmp_path / "out"
    run = proc.start([sys.executable, "-m", "trainer.data", "imagenet", "--src", str(tmp_path / "src"),
                      "--out", str(out), "--reencode", "--workers", "1"], cwd=REPO,
                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # its own process group
    try:
        opened: list[int] = []
        opener = threading.Thread(target=lambda: opened.append(os.open(blocker, os.O_WRONLY)), daemon=True)
        opener.start()
        opener.join(timeout=150)  # returns once the worker has opened the FIFO for reading
        if not opened:  # never reached: release the opener before failing
            os.close(os.open(blocker, os.O_RDONLY | os.O_NONBLOCK))
            pytest.fail(f"the run never reached the last image (exit {run.poll()})")
        workers = _children(run.pid)
        assert workers, "the pool has no worker processes"
        pidfds = [os.pidfd_open(pid) for pid in workers]
        run.send_signal(signal.SIGKILL)  # the parent alone, as the OOM killer would
        run.wait(timeout=60)
        for fd in pidfds:  # readable once that worker has exited: the death signal reached it
            ready, _, _ = select.select([fd], [], [], 60)
            assert ready, "a pool worker outlived its killed parent"
            os.close(fd)
        os.close(opened[0])
    finally:  # whatever failed, nothing of the run's process group outlives the test
        try:
            os.killpg(run.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.stop(run)
    done = [f for f in files if list(out.rglob(f.name))]
    assert done == files[:at]
    for source in done:  # whole images under their final names
        with Image.open(output_of(out, source)) as image:
            image.load()
            assert image.size == (400, 300)  # within the default bound (320): re-encoded, not scaled
    blocker.unlink()
    photo(400, 300).save(blocker, format="JPEG", quality=96, subsampling=0)
    p = run_cli("--src", str(tmp_path / "src"), "--out", str(out), "--reencode", "--workers", "1")
    assert p.returncode == 0, p.stderr
    assert f"{len(files) - at} re-encoded, 0 linked, 0 copied, {at} already in place" in p.stdout
    assert not list(out.rglob(".*.partial"))


@pytest.mark.slow
def test_the_reencoded_copy_trains_a_step_through_the_vision_trainer(tmp_path):
    from trainer_procs import job_env
    release_with(tmp_path / "src", [(400, 300), (260, 390)], classes=2)
    out = tmp_path / "out"
    p = run_cli("--src", str(tmp_path / "src"), "--out", str(out), "--reencode", "--short-side", "256",
                "--workers", "1")
    assert p.returncode == 0, p.stderr
    ck = tmp_path / "ck"
    p = subprocess.run([sys.executable, "-m", "trainer.vision", "--data", str(out), "--image-size", "32",
                        "--batch-size", "4", "--global-batch-size", "4", "--workers", "1", "--epochs", "1",
                        "--warmup-epochs", "0", "--checkpoint-dir", str(ck), "--metrics-file", str(ck / "m.jsonl")],
                       cwd=REPO, env=job_env(), capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = json.loads(p.stdout.split("SUMMARY ", 1)[1].splitlines()[0])
    assert summary["epochs_this_run"] == 1
    [epoch] = [r for r in map(json.loads, (ck / "m.jsonl").read_text().splitlines()) if r["kind"] == "epoch"]
    assert epoch["val_images"] == 4
    # The presets share one data folder: EfficientNet-B7's 600-px crops are refused on this 256 copy.
    p = subprocess.run([sys.executable, "-m", "trainer.vision", "--data", str(out), "--image-size", "600"],
                       cwd=REPO, env=job_env(), capture_output=True, text=True, timeout=120)
    assert (p.returncode, p.stderr.strip()) == (2, f"error: --data: {out} is a re-encoded copy with short side 256 "
                                                   "(reencode.json); --image-size 600 needs at least 686 (crop / "
                                                   "0.875): re-encode with --short-side 686 or more, or train on the "
                                                   "originals")


def test_scaled_size_keeps_the_short_side_at_the_bound_and_never_enlarges():
    assert imagenet_reencode.scaled_size(500, 375, 320) == (427, 320)
    assert imagenet_reencode.scaled_size(375, 500, 320) == (320, 427)
    assert imagenet_reencode.scaled_size(320, 9000, 320) == (320, 9000)
    assert imagenet_reencode.scaled_size(100, 80, 320) == (100, 80)


def test_a_source_replaced_since_the_last_run_is_re_encoded_again_the_others_kept(tmp_path):
    files = release_with(tmp_path / "src", [(200, 150)], classes=1)
    for i, path in enumerate(files):
        photo(200, 150, seed=i).save(path, format="JPEG", quality=75, subsampling=2)  # linked, not re-encoded
    out, settings = tmp_path / "out", Settings(short_side=256, jpeg_quality=90)
    assert imagenet.rearrange(tmp_path / "src", out, settings, 1).linked == 4
    replaced = files[0]
    new = tmp_path / "new.JPEG"
    photo(640, 480, seed=9).save(new, format="JPEG", quality=96, subsampling=0)
    os.replace(new, replaced)  # a new file, as a new download is; the old one lives on as the link
    report = imagenet.rearrange(tmp_path / "src", out, settings, 1)
    assert (report.reencoded, report.present) == (1, 3)
    with Image.open(output_of(out, replaced)) as image:
        assert image.size == (341, 256)
    assert Image.open(replaced).size == (640, 480)  # the source untouched


@pytest.mark.parametrize("split, mode", [("train", 0o300), ("val", 0o100)])
def test_a_split_of_out_this_user_may_enter_but_not_list_is_one_line_naming_out(tmp_path, split, mode):
    """Checking that --out holds no images placed without --reencode, Path.iterdir raised its
    PermissionError: a traceback."""
    from cli_sweep import denied_as_a_user

    write_tiny_ilsvrc(tmp_path / "src", classes=1, train_per_class=1, val_per_class=1)
    out = tmp_path / "out"
    (out / split).mkdir(parents=True, mode=mode)
    with denied_as_a_user(), pytest.raises(UsageError) as err:
        imagenet.rearrange(tmp_path / "src", out, Settings(short_side=256, jpeg_quality=90), workers=1)
    assert str(err.value) == f"--out: cannot list {out / split} (Permission denied)"
    assert sorted(p.name for p in out.iterdir()) == [split]  # no manifest claimed the folder
