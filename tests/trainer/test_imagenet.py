"""`python -m trainer.data imagenet`: the ILSVRC2012 release (LOC_synset_mapping.txt,
LOC_val_solution.csv whose PredictionString starts with the wnid, train/<wnid>/ and a flat val/
under ILSVRC/Data/CLS-LOC/) becomes ImageFolder train/ and val/<wnid>/; reruns skip finished
files, and bad input is one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from trainer import imagenet, imagenet_reencode
from trainer.cli import UsageError
from trainer.data import main as data_main
from ilsvrc_tiny import wnid, write_tiny_ilsvrc

REPO = Path(__file__).resolve().parents[2]


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainer.data", "imagenet", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=120)


@pytest.fixture
def release(tmp_path):
    labels = write_tiny_ilsvrc(tmp_path / "src", classes=3, train_per_class=2, val_per_class=2)
    return tmp_path / "src", labels


def test_validation_images_go_into_the_class_folder_their_solution_row_names(release, tmp_path):
    src, labels = release
    out = tmp_path / "out"
    proc = run_cli("--src", str(src), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    for image_id, label in labels.items():
        placed = out / "val" / label / f"{image_id}.JPEG"
        assert placed.read_bytes() == (src / "ILSVRC/Data/CLS-LOC/val" / f"{image_id}.JPEG").read_bytes()
    assert sorted(p.name for p in (out / "train").iterdir()) == sorted({wnid(c) for c in range(3)})
    assert sorted(p.name for p in (out / "val").iterdir()) == sorted(set(labels.values()))
    assert len(list((out / "train").rglob("*.JPEG"))) == 6
    # The report counts what it found against the full release.
    assert "3 classes (expected 1,000), 6 training images, 6 validation images (expected 50,000" in proc.stdout
    assert "not the full ILSVRC2012 set" in proc.stdout


def test_same_file_system_links_instead_of_copying(release, tmp_path):
    src, labels = release
    report = imagenet.rearrange(src, tmp_path / "out")
    assert (report.linked, report.copied) == (12, 0)
    image_id, label = next(iter(labels.items()))
    assert os.path.samefile(tmp_path / "out" / "val" / label / f"{image_id}.JPEG",
                            src / "ILSVRC/Data/CLS-LOC/val" / f"{image_id}.JPEG")


def test_a_rerun_places_nothing_again_and_completes_an_interrupted_one(release, tmp_path):
    src, labels = release
    out = tmp_path / "out"
    first = imagenet.rearrange(src, out)
    assert first.linked + first.copied == 12
    # An interrupted run: one image never placed, one copy left under its temporary name.
    image_id, label = next(iter(labels.items()))
    target = out / "val" / label / f"{image_id}.JPEG"
    target.unlink()
    target.with_name(f".{target.name}.partial").write_bytes(b"half")
    again = imagenet.rearrange(src, out)
    assert (again.present, again.linked + again.copied) == (11, 1)
    assert target.read_bytes() == (src / "ILSVRC/Data/CLS-LOC/val" / f"{image_id}.JPEG").read_bytes()


def test_across_file_systems_it_copies_through_a_temporary_name(release, tmp_path, monkeypatch):
    src, _ = release

    def no_link(a, b):
        raise OSError(18, "Invalid cross-device link")  # EXDEV

    renames = []
    real_replace = os.replace
    monkeypatch.setattr(imagenet_reencode.os, "link", no_link)
    monkeypatch.setattr(imagenet_reencode.os, "replace", lambda a, b: (renames.append((Path(a).name, Path(b).name)),
                                                              real_replace(a, b)))
    report = imagenet.rearrange(src, tmp_path / "out")
    assert (report.linked, report.copied) == (0, 12)
    assert all(a == f".{b}.partial" for a, b in renames) and len(renames) == 12
    assert not list((tmp_path / "out").rglob("*.partial"))


@pytest.mark.parametrize("special, what", [("pipe", "a named pipe"), ("device", "a character device")])
def test_a_training_image_that_is_a_pipe_or_a_device_is_one_line_naming_src_not_copied(
        release, tmp_path, monkeypatch, special, what):
    # Across file systems the image is copied: a link to /dev/zero was copied until the disk was
    # full (12 GB in 6 s here), a link to /dev/null became an empty image, and a pipe was blamed on --out.
    src, _ = release
    bad = next((src / "ILSVRC/Data/CLS-LOC/train").iterdir()) / "bad.JPEG"
    if special == "pipe":
        os.mkfifo(bad)
    else:
        bad.symlink_to("/dev/null")  # /dev/zero's stand-in: the same device kind, and an old copy of it ends
    monkeypatch.setattr(imagenet_reencode.os, "link", lambda a, b: (_ for _ in ()).throw(OSError(18, "EXDEV")))
    with pytest.raises(UsageError) as refused:
        imagenet.rearrange(src, tmp_path / "out")
    assert str(refused.value) == f"--src: {bad} is {what}, expected a regular file"
    assert not list((tmp_path / "out").rglob("bad.JPEG*"))


def test_the_flat_layout_without_the_ILSVRC_folders_works_too(tmp_path):
    src = tmp_path / "src"
    write_tiny_ilsvrc(src, classes=2)
    flat = tmp_path / "flat"
    (src / "ILSVRC/Data/CLS-LOC").rename(flat)
    for name in ("LOC_synset_mapping.txt", "LOC_val_solution.csv"):
        (src / name).rename(flat / name)
    report = imagenet.rearrange(flat, tmp_path / "out")
    assert (report.classes, report.train_images, report.val_images) == (2, 4, 4)


def test_listed_but_absent_validation_images_are_reported(release, tmp_path):
    src, labels = release
    missing = sorted(labels)[0]
    (src / "ILSVRC/Data/CLS-LOC/val" / f"{missing}.JPEG").unlink()
    report = imagenet.rearrange(src, tmp_path / "out")
    assert report.val_missing == [missing]
    assert f"1 listed validation images are not in val/, e.g. {missing}" in "\n".join(report.lines(tmp_path))


@pytest.mark.parametrize("breakage, message", [
    (lambda s: (s / "LOC_val_solution.csv").unlink(),
     "has no LOC_val_solution.csv (the ILSVRC2012 release ships it beside ILSVRC/)"),
    (lambda s: (s / "LOC_synset_mapping.txt").write_text("tench, Tinca tinca\n"),
     "LOC_synset_mapping.txt:1: expected '<wnid> <names>' with a wnid like n01440764, got 'tench, Tinca tinca'"),
    (lambda s: (s / "LOC_val_solution.csv").write_text("ImageId,Label\n"),
     "LOC_val_solution.csv:1: expected the header ImageId,PredictionString, got ['ImageId', 'Label']"),
    (lambda s: (s / "LOC_val_solution.csv").write_text("ImageId,PredictionString\nILSVRC2012_val_00000001,\n"),
     "LOC_val_solution.csv:2: expected ImageId,<wnid> <box>..., got 'ILSVRC2012_val_00000001,'"),
    (lambda s: (s / "LOC_val_solution.csv").write_text("ImageId,PredictionString\nILSVRC2012_val_00000001,n09999999 1 2 3 4\n"),
     "LOC_val_solution.csv:2: 'n09999999' is not a class of LOC_synset_mapping.txt"),
    (lambda s: (s / "ILSVRC/Data/CLS-LOC/train" / "n09999999").mkdir(),
     "n09999999 is not a class of LOC_synset_mapping.txt"),
    (lambda s: (s / "ILSVRC/Data/CLS-LOC/val" / "ILSVRC2012_val_00099999.JPEG").write_bytes(b"x"),
     "ILSVRC2012_val_00099999.JPEG is not listed in LOC_val_solution.csv (1 validation images are not)"),
    (lambda s: (s / "LOC_synset_mapping.txt").write_bytes("n01440764 tench\nn01443537 poisson doré\n".encode("latin-1")),
     "LOC_synset_mapping.txt:2: not UTF-8 text (invalid continuation byte)"),
    (lambda s: (s / "LOC_val_solution.csv").write_text("ImageId,PredictionString\n" + "x" * 200_000 + "\n"),
     "LOC_val_solution.csv:2: not CSV (field larger than field limit (131072))"),
])
def test_a_missing_or_malformed_input_is_one_error_naming_file_and_line(release, tmp_path, breakage, message):
    src, _ = release
    breakage(src)
    with pytest.raises(UsageError) as err:
        data_main(["imagenet", "--src", str(src), "--out", str(tmp_path / "out")])
    assert str(err.value).startswith("--src: ") and str(err.value).endswith(message), err.value
    assert not (tmp_path / "out").exists()  # checked before anything is placed


def test_on_the_command_line_bad_input_is_one_line_and_exit_2(release, tmp_path):
    src, _ = release
    (src / "LOC_synset_mapping.txt").unlink()
    proc = run_cli("--src", str(src), "--out", str(tmp_path / "out"))
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"error: --src: {src} has no LOC_synset_mapping.txt "
                                   "(the ILSVRC2012 release ships it beside ILSVRC/)")


def test_a_missing_image_folder_is_one_clear_error(release, tmp_path):
    src, _ = release
    import shutil
    shutil.rmtree(src / "ILSVRC/Data/CLS-LOC/train")
    with pytest.raises(UsageError, match=r"--src: .*CLS-LOC has no train/ folder$"):
        imagenet.rearrange(src, tmp_path / "out")


def test_a_source_image_replaced_since_the_last_run_is_placed_again_even_at_the_same_size(release, tmp_path):
    """trainer.s3sync replaces a changed object with a new file; the old hard link must not stay."""
    src, labels = release
    out = tmp_path / "out"
    imagenet.rearrange(src, out)
    image_id, label = next(iter(labels.items()))
    source = src / "ILSVRC/Data/CLS-LOC/val" / f"{image_id}.JPEG"
    fresh = source.with_name("fresh")
    fresh.write_bytes(bytes(reversed(source.read_bytes())))
    os.replace(fresh, source)
    report = imagenet.rearrange(src, out)
    assert (report.present, report.linked) == (11, 1)
    assert (out / "val" / label / f"{image_id}.JPEG").read_bytes() == source.read_bytes()


def test_an_output_that_cannot_be_created_is_one_line_and_exit_2(release, tmp_path):
    src, _ = release
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    proc = run_cli("--src", str(src), "--out", str(blocker / "imagenet"))
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: --out: cannot create directory {blocker / 'imagenet'} (") and proc.stderr.count("\n") == 1


def test_a_copy_that_fails_leaves_no_partial_file_and_is_one_line(release, tmp_path, monkeypatch):
    src, _ = release

    def no_links(*args):
        raise OSError(18, "Invalid cross-device link")

    def full_disk(source, target):
        Path(target).write_bytes(b"half")
        raise OSError(28, "No space left on device", str(target))

    monkeypatch.setattr(imagenet_reencode.os, "link", no_links)
    monkeypatch.setattr(imagenet_reencode.shutil, "copyfile", full_disk)
    with pytest.raises(UsageError, match=r"^--out: cannot write .*\.JPEG: No space left on device$"):
        imagenet.rearrange(src, tmp_path / "out")
    assert not list((tmp_path / "out").rglob("*.partial")) and not list((tmp_path / "out").rglob("*.JPEG"))


@pytest.mark.parametrize("where", ["a class folder", "train", "val"])
def test_a_folder_of_the_release_this_user_may_not_list_is_one_line_naming_src(release, tmp_path, where):
    """Path.iterdir raised its PermissionError: a traceback and exit 1."""
    from cli_sweep import denied_as_a_user

    src, _ = release
    images = src / "ILSVRC/Data/CLS-LOC"
    folder = sorted((images / "train").iterdir())[0] if where == "a class folder" else images / where
    folder.chmod(0)
    with denied_as_a_user(), pytest.raises(UsageError) as err:
        imagenet.rearrange(src, tmp_path / "out")
    assert str(err.value) == f"--src: cannot enter {folder} (Permission denied)"
    assert not (tmp_path / "out").exists()
