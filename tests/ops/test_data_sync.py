"""The data Job's copy and preparation end to end against a moto S3 server on loopback:
`trainer.s3sync` copies a small dataset in the ILSVRC2012 layout from S3 (parallel, resumable by
size and ETag, never a partial file under a final name), then `trainer.data imagenet` turns the
copy into ImageFolder train/ and val/<wnid>/."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import boto3
import botocore.response
import pytest

from ops_fakes import REPO_ROOT, isolated_aws_env
from trainer import s3sync
from trainer.cli import UsageError
from ilsvrc_tiny import write_tiny_ilsvrc

BUCKET = "datasets-example"
PREFIX = "imagenet/raw/"


@pytest.fixture
def bucket(aws, tmp_path):
    """A bucket holding a 3-class ILSVRC2012-layout dataset under PREFIX; returns (client, labels, local copy)."""
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket=BUCKET)
    local = tmp_path / "release"
    labels = write_tiny_ilsvrc(local, classes=3, train_per_class=3, val_per_class=2)
    for path in sorted(p for p in local.rglob("*") if p.is_file()):
        client.put_object(Bucket=BUCKET, Key=PREFIX + path.relative_to(local).as_posix(), Body=path.read_bytes())
    client.put_object(Bucket=BUCKET, Key=PREFIX + "ILSVRC/", Body=b"")  # a console-made folder marker
    client.put_object(Bucket=BUCKET, Key="imagenet/other/secret.txt", Body=b"not ours")
    return client, labels, local


def files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*")
            if p.is_file() and p.name != s3sync.JOURNAL}


def quiet_sync(client, dest: Path, **kwargs) -> tuple[int, list[str]]:
    lines: list[str] = []
    failed = s3sync.sync(client, f"s3://{BUCKET}/{PREFIX}", dest, echo=lines.append, **kwargs)
    return failed, lines


def test_the_job_steps_copy_the_prefix_and_rearrange_it_into_imagefolder(bucket, aws, tmp_path):
    _, labels, local = bucket
    env = isolated_aws_env(tmp_path / "home", aws)
    env["MOTO_ACCOUNT_ID"] = "222222222222"
    raw, out = tmp_path / "fsx" / "sources" / "imagenet", tmp_path / "fsx" / "data" / "imagenet"
    copy = subprocess.run([sys.executable, "-m", "trainer.s3sync", "--src", f"s3://{BUCKET}/{PREFIX}",
                           "--dest", str(raw), "--workers", "4", "--progress-seconds", "0"],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert copy.returncode == 0, copy.stderr
    assert files(raw) == files(local)  # every object, nothing outside the prefix, no folder marker
    log = copy.stdout.splitlines()
    assert log[0] == f"s3sync: s3://{BUCKET}/{PREFIX} -> {raw}: 17 objects to copy (0.00 GiB), 0 already copied"
    assert "s3sync: 17/17 files" in log[-2] and log[-1].startswith("s3sync: done: 17 copied, 0 already there, 0 failed")

    prep = subprocess.run([sys.executable, "-m", "trainer.data", "imagenet", "--src", str(raw), "--out", str(out)],
                          cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert prep.returncode == 0, prep.stderr
    for image_id, label in labels.items():
        assert (out / "val" / label / f"{image_id}.JPEG").read_bytes() == \
            (local / "ILSVRC/Data/CLS-LOC/val" / f"{image_id}.JPEG").read_bytes()
    assert len(list((out / "train").rglob("*.JPEG"))) == 9
    assert "3 classes (expected 1,000), 9 training images, 6 validation images" in prep.stdout


def test_a_second_run_copies_nothing_and_a_changed_object_is_copied_again(bucket, tmp_path):
    client, _, local = bucket
    dest = tmp_path / "dest"
    assert quiet_sync(client, dest)[0] == 0
    stamps = {p: p.stat().st_mtime_ns for p in dest.rglob("*.JPEG")}

    failed, lines = quiet_sync(client, dest)
    assert failed == 0
    assert lines[0].endswith(": 0 objects to copy (0.00 GiB), 17 already copied")
    assert {p: p.stat().st_mtime_ns for p in dest.rglob("*.JPEG")} == stamps

    # Same size, new content: only the ETag tells them apart.
    key = "ILSVRC/Data/CLS-LOC/val/ILSVRC2012_val_00000001.JPEG"
    old = (local / key).read_bytes()
    new = bytes(reversed(old))
    assert len(new) == len(old) and new != old
    client.put_object(Bucket=BUCKET, Key=PREFIX + key, Body=new)
    failed, lines = quiet_sync(client, dest)
    assert failed == 0
    assert lines[0].endswith(": 1 objects to copy (0.00 GiB), 16 already copied")
    assert (dest / key).read_bytes() == new


def test_a_file_removed_or_truncated_on_fsx_is_copied_again(bucket, tmp_path):
    client, _, local = bucket
    dest = tmp_path / "dest"
    quiet_sync(client, dest)
    (dest / "LOC_val_solution.csv").unlink()
    (dest / "LOC_synset_mapping.txt").write_bytes(b"x")
    with (dest / s3sync.JOURNAL).open("a") as journal:
        journal.write('{"key": "torn')  # a run killed while appending
    failed, lines = quiet_sync(client, dest)
    assert (failed, lines[0].split(": ")[-1]) == (0, "2 objects to copy (0.00 GiB), 15 already copied")
    assert files(dest) == files(local)


def test_an_interrupted_download_never_leaves_a_partial_file_under_its_final_name(bucket, tmp_path, monkeypatch):
    client, _, local = bucket
    dest = tmp_path / "dest"
    real_chunks = botocore.response.StreamingBody.iter_chunks

    def cut_off(self, chunk_size):
        chunks = real_chunks(self, chunk_size)
        yield next(chunks)
        raise ConnectionResetError("connection reset by peer")

    monkeypatch.setattr(s3sync, "CHUNK_BYTES", 4)
    monkeypatch.setattr(botocore.response.StreamingBody, "iter_chunks", cut_off)
    failed, lines = quiet_sync(client, dest, workers=2)
    assert failed == 17
    assert "s3sync: failed s3://datasets-example/imagenet/raw/" in lines[1]
    assert lines[1].endswith(": connection reset by peer")
    assert [p for p in dest.rglob("*") if p.is_file()] == []  # neither finals nor temporary files

    # A run killed outright leaves its temporary file; the next run overwrites and renames it.
    monkeypatch.setattr(botocore.response.StreamingBody, "iter_chunks", real_chunks)
    target = dest / "LOC_val_solution.csv"
    target.parent.mkdir(parents=True, exist_ok=True)
    stale = target.with_name(f".{target.name}{s3sync.PARTIAL_SUFFIX}")
    stale.write_bytes(b"ImageId,Predi")
    assert quiet_sync(client, dest)[0] == 0
    assert files(dest) == files(local)
    assert not stale.exists()


def test_an_object_replaced_between_listing_and_download_fails_that_file_only(bucket, tmp_path, monkeypatch):
    client, _, local = bucket
    dest = tmp_path / "dest"
    key = PREFIX + "LOC_synset_mapping.txt"
    listed = s3sync.list_objects

    def list_then_replace(*args):
        objects = listed(*args)
        client.put_object(Bucket=BUCKET, Key=key, Body=b"n09999999 replaced\n")
        return objects

    monkeypatch.setattr(s3sync, "list_objects", list_then_replace)
    failed, lines = quiet_sync(client, dest)
    assert failed == 1
    assert any(line.startswith(f"s3sync: failed s3://{BUCKET}/{key}:") and "PreconditionFailed" in line
               for line in lines)
    assert not (dest / "LOC_synset_mapping.txt").exists()
    monkeypatch.setattr(s3sync, "list_objects", listed)
    assert quiet_sync(client, dest)[0] == 0
    assert (dest / "LOC_synset_mapping.txt").read_bytes() == b"n09999999 replaced\n"


def test_a_bucket_it_cannot_list_is_one_line_and_exit_2(aws, tmp_path):
    env = isolated_aws_env(tmp_path / "home", aws)
    proc = subprocess.run([sys.executable, "-m", "trainer.s3sync", "--src", "s3://no-such-bucket/x/",
                           "--dest", str(tmp_path / "d")], cwd=REPO_ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith("error: --src: cannot list s3://no-such-bucket/x/: An error occurred (NoSuchBucket)")


@pytest.mark.parametrize("uri", ["s3:/bucket/x", "https://bucket/x", "s3://Bucket/x"])
def test_a_source_that_is_not_an_s3_uri_is_refused(uri):
    with pytest.raises(UsageError, match=r"^--src: must be s3://BUCKET/PREFIX/"):
        s3sync.parse_uri(uri)


def test_keys_that_would_escape_the_destination_are_refused():
    with pytest.raises(UsageError, match="does not map to a file below --dest"):
        s3sync.relative_path("p/../../etc/passwd", "p/")
    assert s3sync.relative_path("p/a/b.JPEG", "p/").parts == ("a", "b.JPEG")
    assert s3sync.relative_path("p/a/", "p/") is None


def test_the_rendered_jobs_own_command_copies_and_prepares_and_a_rerun_redoes_nothing(aws, tmp_path):
    """dev's imagenet source: the container command k8s/data_jobs.py renders, run as-is under sh
    with /fsx mapped to a temporary folder, against moto holding the release under the source's prefix."""
    from k8s.pods.data_job import data_job_manifest
    from ops.envconfig import load

    env = load("dev")
    source = env.data_source("imagenet")
    client = boto3.client("s3", region_name="us-east-1")
    client.create_bucket(Bucket=source.bucket)
    local = tmp_path / "release"
    labels = write_tiny_ilsvrc(local, classes=2, train_per_class=2, val_per_class=2)
    for path in (p for p in local.rglob("*") if p.is_file()):
        client.put_object(Bucket=source.bucket, Key=source.prefix + path.relative_to(local).as_posix(),
                          Body=path.read_bytes())
    [container] = data_job_manifest(env, source, image="img:1")["spec"]["template"]["spec"]["containers"]
    fsx = tmp_path / "fsx"
    command = [part.replace("/fsx/", f"{fsx}/") for part in container["command"]]
    run_env = isolated_aws_env(tmp_path / "home", aws)
    run_env["PATH"] = f"{Path(sys.executable).parent}:{run_env['PATH']}"  # `python` is this interpreter

    first = subprocess.run(command, cwd=REPO_ROOT, env=run_env, capture_output=True, text=True, timeout=180)
    assert first.returncode == 0, first.stderr
    out = fsx / "data" / "imagenet"
    for image_id, label in labels.items():
        assert (out / "val" / label / f"{image_id}.JPEG").is_file()
    assert "10 objects to copy" in first.stdout and "2 classes (expected 1,000)" in first.stdout

    again = subprocess.run(command, cwd=REPO_ROOT, env=run_env, capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, again.stderr
    assert ": 0 objects to copy (0.00 GiB), 10 already copied" in again.stdout
    assert "0 linked, 0 copied, 8 already in place" in again.stdout
