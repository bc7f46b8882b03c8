"""trainer.vision under real torchrun with faults: an agent SIGKILLed under an elastic node range
on a real etcd (the survivor re-forms the group smaller and continues), a worker SIGKILLed under
a fixed size, a corrupt newest checkpoint, a resume on another number of ranks, and SIGTERM with
loader processes and with a GPU decoder's thread."""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import signal
import uuid
from pathlib import Path

import pytest
import torch

pytest.importorskip("torchvision", reason="torchvision is a pinned dependency")

from config.kubernetes import EXIT_PREEMPTED, TORCHRUN_FAILED  # noqa: E402
from ops import local  # noqa: E402
from trainer.checkpoint import list_steps, step_dir  # noqa: E402
from trainer_procs import Job, elastic_agent_args, preempt, run, torchrun_args, wait_any  # noqa: E402

pytestmark = pytest.mark.slow

RESUMED = re.compile(r"Resumed from checkpoint \S+ \(step (\d+)\)")
STARTING = re.compile(r"world size (\d+), global batch \d+; starting at epoch (\d+), image (\d+) of \d+ \(step (\d+)\)")
IMAGES, BATCH = 512, 16  # 16 steps an epoch on 2 ranks, 32 on one


def vision(ckpt, *extra, epochs=1, every=5):
    return ["--image-size", "16", "--batch-size", str(BATCH), "--workers", "0", "--train-samples", str(IMAGES),
            "--val-samples", "64", "--epochs", str(epochs), "--lr", "0.2", "--warmup-epochs", "0", "--log-every", "4",
            "--checkpoint-dir", str(ckpt), "--checkpoint-every", str(every), "--keep-checkpoints", "10",
            "--dist-timeout", "20", *extra]


def summary(output: str) -> dict:
    return json.loads(output.split("SUMMARY ", 1)[1].splitlines()[0])


def starts(output: str) -> list[tuple[int, int, int, int]]:
    """(world size, epoch, image, step) of each start of rank 0."""
    return [tuple(map(int, m.groups())) for m in STARTING.finditer(output)]


def test_a_mid_epoch_checkpoint_resumes_on_one_rank_where_two_stopped_and_a_corrupt_newest_falls_back(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    rc, out = run(torchrun_args("trainer.vision", vision(a, "--metrics-file", str(a / "m.jsonl"))))
    assert rc == 0, out
    assert list_steps(a) == [5, 10, 15, 16]  # every 5 steps and the epoch's end

    # Step 10 on 2 ranks of 16 images: the job had consumed images 0..319 of epoch 0's order.
    shutil.copytree(step_dir(a, 10), step_dir(b, 10))
    shutil.copy(a / "model.json", b / "model.json")
    rc, out = run(torchrun_args("trainer.vision", vision(b, "--metrics-file", str(b / "m.jsonl")), nproc=1))
    assert rc == 0, out
    assert [int(s) for s in RESUMED.findall(out)] == [10]
    assert starts(out) == [(1, 0, 10 * BATCH * 2, 10)]
    [epoch] = [r for r in map(json.loads, (b / "m.jsonl").read_text().splitlines()) if r["kind"] == "epoch"]
    # The rest of the epoch, once, in steps of the same global batch (2 micro-batches on one rank).
    assert epoch["steps"] == (IMAGES - 320) // (2 * BATCH) and epoch["world_size"] == 1
    assert summary(out)["steps"] == 10 + 6

    # The newest checkpoint is corrupt: warn, fall back to step 15, and finish the next epoch.
    shard = step_dir(a, 16) / "__0_0.distcp"
    shard.write_bytes(shard.read_bytes()[:100])
    rc, out = run(torchrun_args("trainer.vision", vision(a, epochs=2)))
    assert rc == 0, out
    assert re.search(r"WARNING: checkpoint \S+step-00000016 is damaged \(__0_0.distcp is truncated", out), out
    assert [int(s) for s in RESUMED.findall(out)] == [15]
    assert starts(out) == [(2, 0, 15 * BATCH * 2, 15)]
    assert summary(out)["steps"] == 32 and summary(out)["epochs_this_run"] == 2


def test_a_sigkilled_worker_is_restarted_and_resumes_from_the_last_checkpoint(tmp_path):
    job = Job(torchrun_args("trainer.vision", vision(tmp_path, epochs=3), max_restarts=2))
    try:
        job.wait_for(r"Checkpoint saved: \S+step-00000020")
        job.kill_worker(1)
        rc = job.finish(timeout=240)
    finally:
        job.stop()
    out = job.output
    assert rc == 0, out
    resumed = [int(s) for s in RESUMED.findall(out)]
    assert resumed and resumed[0] >= 20, out
    assert summary(out)["steps"] == 48 and list_steps(tmp_path)[-1] == 48


def _elastic_agent(endpoint: str, run_id: str, ckpt) -> Job:
    """One torchrun agent of a 1..2-node job on the etcd-v2 rendezvous (a node = an agent here)."""
    # min < max waits out the last call before a round closes: 30 s by default (NOTES.md).
    return Job([*elastic_agent_args(endpoint, run_id, nnodes="1:2", max_restarts=3,
                                    rdzv_conf="last_call_timeout=1,timeout=120"),
                "-m", "trainer.vision", *vision(ckpt, epochs=4, every=4)])


@pytest.mark.skipif(not (shutil.which("etcd") or os.path.exists("/usr/bin/etcd")),
                    reason="etcd not installed (make etcd installs it)")
def test_a_sigkilled_agent_leaves_a_survivor_that_reforms_smaller_and_continues_from_the_last_checkpoint(tmp_path):
    with local.etcd_server(local.find_etcd(None)) as etcd:
        run_id = f"vision-{uuid.uuid4().hex[:8]}"
        agents = [_elastic_agent(etcd.endpoint, run_id, tmp_path) for _ in range(2)]
        survivor, victim = agents
        try:
            wait_any(agents, r"world size 2, global batch", timeout=120)
            wait_any(agents, r"Checkpoint saved: \S+step-00000008", timeout=120)
            saved_before = max(list_steps(tmp_path))
            killed_at = len(survivor.lines)
            # A lost node: the agent and its worker (torchrun starts workers in their own session,
            # so killing the agent's process group alone would leave the worker training).
            workers = list(victim.workers().values())
            assert workers, "the victim agent has no worker"
            for pid in (victim.proc.pid, *workers):
                os.kill(pid, signal.SIGKILL)
            victim.proc.wait()
            rc = survivor.finish(timeout=300)
        finally:
            for agent in agents:
                agent.stop()
    out = survivor.output
    assert rc == 0, out
    after = [s for s in starts("\n".join(survivor.lines[killed_at:])) if s[0] == 1]
    assert after, f"the survivor never restarted alone from a checkpoint:\n{out[-4000:]}"
    world, epoch, image, step = after[-1]
    assert step >= saved_before > 0  # from the last checkpoint, not from the start
    result = summary(out)
    assert result["world_size"] == 1 and result["epochs"] == 4 and result["resumed_from"]["epoch"] == epoch
    assert list_steps(tmp_path)[-1] == result["steps"]


@pytest.mark.parametrize("workers", ["0", "2"])
def test_sigterm_saves_a_checkpoint_mid_epoch_exits_non_zero_and_the_next_run_resumes_from_its_image(tmp_path,
                                                                                                    workers):
    """torchrun forwards SIGTERM to each worker's whole process group (os.killpg), so with loader
    processes (--workers 2, as every GPU preset has) they get it too: they must leave it to their
    rank, which finishes its step and saves, and not die under it (the rank then failed with
    "DataLoader worker ... is killed by signal: Terminated" and saved nothing)."""
    rc, out = preempt(torchrun_args("trainer.vision", vision(tmp_path, "--workers", workers, epochs=3, every=1000)),
                      after=r"^step\s+8 ")
    assert rc == TORCHRUN_FAILED, out[-3000:]
    m = re.search(rf"SIGTERM: checkpoint saved at step (\d+) \(epoch (\d+)\); exiting with status {EXIT_PREEMPTED}",
                  out)
    assert m, out
    step = int(m[1])
    assert list_steps(tmp_path)[-1] == step
    rc, out = run(torchrun_args("trainer.vision", vision(tmp_path, epochs=1, every=1000)))
    assert rc == 0, out
    assert [int(s) for s in RESUMED.findall(out)] == [step]
    world, epoch, image, resumed_step = starts(out)[0]
    assert (epoch, resumed_step) == (step // 16, step) and image == (step % 16) * BATCH * 2


@pytest.mark.parametrize("decode", ["nvimgcodec", "dali"])
def test_sigterm_with_a_gpu_decoder_stops_its_thread_saves_and_the_next_run_resumes(image_folder, tmp_path, decode):
    """With a GPU decoder (here nvImageCodec's CPU backend, or DALI's CPU operators) the model's
    inputs are made in a thread beside the step loop (vision_decode.DecodeAhead) from the bytes that
    loader processes read. A preemption mid-epoch stops that thread, both ranks save the same step
    and exit 143, and the next run resumes from it with the same decoder on one rank (the node
    count changed: two micro-batches a step) at the image where the two stopped, and finishes."""
    args = ["--data", str(image_folder), "--image-size", "16", "--batch-size", "4", "--workers", "2",
            "--epochs", "3", "--lr", "0.2", "--warmup-epochs", "0", "--log-every", "1", "--checkpoint-dir",
            str(tmp_path), "--checkpoint-every", "1000", "--dist-timeout", "120", "--decode", decode]
    # A GPU decoder here decodes on the CPU of each rank beside 2 loader processes: on 2 shared cores
    # one rank can trail the other's collective by over 20 s (a CI run timed out so), hence 120.
    rc, out = preempt(torchrun_args("trainer.vision", args), after=r"^step\s+8 ", timeout=240)  # 6 steps an epoch
    assert rc == TORCHRUN_FAILED, out[-3000:]
    saved = re.findall(rf"SIGTERM: checkpoint saved at step (\d+) \(epoch 1\); exiting with status {EXIT_PREEMPTED}",
                       out)
    assert len(saved) == 2 and len(set(saved)) == 1, out[-3000:]  # both ranks, the same step
    step = int(saved[0])
    assert list_steps(tmp_path)[-1] == step
    rc, out = run(torchrun_args("trainer.vision", args, nproc=1))
    assert rc == 0, out[-3000:]
    assert [int(s) for s in RESUMED.findall(out)] == [step]
    assert starts(out) == [(1, 1, (step - 6) * 8, step)]  # world size 1, epoch 1, global images 8 a step
    assert summary(out)["steps"] == 18 and summary(out)["epochs_this_run"] == 2 and summary(out)["world_size"] == 1


def unreadable_on_rank_1(image_folder, root, split: str) -> list:
    """A copy of `image_folder` in which 3 of the images rank 1 of 2 reads are not images: in
    train/ 3 of the 4 it trains on in step 2 of epoch 0 (a global batch of 8, seed 0), in val/ 3
    of those it evaluates (images 1, 3, 5, ...). Each one's stand-in, the next image, is readable."""
    from config.workloads.vision import ImageDataConfig, SyntheticImagesConfig
    from trainer.vision_data import build_datasets

    shutil.copytree(image_folder, root)
    train, val, _ = build_datasets(ImageDataConfig(source=str(root), image_size=16), SyntheticImagesConfig(), seed=0)
    if split == "train":
        order = torch.randperm(len(train), generator=torch.Generator().manual_seed(0)).tolist()
        step_2 = sorted(order[8 + 4:8 + 8])  # step 2 starts at image 8; rank 1 reads its second half
        chosen = [train.samples[i][0] for i in step_2 if i + 1 not in step_2][:3]
    else:
        chosen = [val.samples[i][0] for i in (1, 3, 5)]
    for path in chosen:
        Path(path).write_bytes(b"<html>404 Not Found</html>" * 8)
    return chosen


@pytest.mark.parametrize("split, trained", [("train", 4), ("val", 6)])
def test_unreadable_images_past_the_limit_on_one_rank_stop_every_rank_with_the_same_line(image_folder, tmp_path,
                                                                                         split, trained):
    """Only the rank over --max-bad-images stopped (exit 2); the other waited in the step's
    all-reduce until the collective timeout, or crashed with a traceback once its peer's socket
    closed ("Connection reset by peer"). Now the count rides on the preemption flag: every rank
    stops at the same step with the same line and exit 2, saved as on preemption. Found in step 2's
    training, it stops after step 4 (LAG_STEPS later); found in epoch 0's evaluation, after it,
    with the checkpoint at the end of the epoch's training, so that a resume (the files replaced)
    evaluates it again."""
    data = tmp_path / "data"
    bad = unreadable_on_rank_1(image_folder, data, split)
    args = ["--data", str(data), "--image-size", "16", "--batch-size", "4", "--workers", "0", "--epochs", "2",
            "--lr", "0.2", "--warmup-epochs", "0", "--log-every", "1", "--checkpoint-dir", str(tmp_path / "ck"),
            "--checkpoint-every", "1000", "--dist-timeout", "60"]
    rc, out = run(torchrun_args("trainer.vision", [*args, "--max-bad-images", "2"]), timeout=120)
    assert rc == TORCHRUN_FAILED, out[-3000:]
    lines = re.findall(r"error: --max-bad-images: \d+ images of epoch 0 could not be read on rank 1, more than the 2 "
                       r"allowed; that rank's warnings name each file \(replace or remove them, or raise the limit\)",
                       out)
    # The two workers share torchrun's stderr.
    assert len(lines) == 2 and len(set(lines)) == 1 and out.count("error:") == 2, out[-3000:]
    assert set(re.findall(r"exitcode\s*:\s*(-?\d+)", out)) == {"2"}, out[-3000:]
    # Not a preemption stop. torchrun's own "Sending process N closing signal SIGTERM" may appear: the
    # ranks exit within moments of each other, and the agent signals whichever is still running.
    assert "crashed" not in out and "failed unexpectedly" not in out and "SIGTERM: checkpoint" not in out, \
        out[-3000:]
    assert [int(s) for s in re.findall(r"^step\s+(\d+) \|", out, re.M)] == list(range(1, trained + 1)), out[-3000:]
    assert list_steps(tmp_path / "ck") == [trained]
    assert "epoch 0 done" not in out, out[-3000:]  # nor an evaluation over too many stand-ins

    for path in bad:  # replaced: the resume continues where every rank stopped
        shutil.copy(next(p for p in Path(path).parent.iterdir() if str(p) not in bad), path)
    rc, out = run(torchrun_args("trainer.vision", args), timeout=120)
    assert rc == 0, out[-3000:]
    assert [int(s) for s in RESUMED.findall(out)] == [trained]
    assert starts(out) == [(2, 0, trained * 8, trained)]
    assert summary(out)["steps"] == 12 and summary(out)["epochs_this_run"] == 2


def unreadable_in_a_row_on_rank_1(image_folder, root) -> None:
    """A copy of `image_folder` in which IN_A_ROW training images in a row of the dataset's order
    are not images, the first of them one that rank 1 of 2 trains on in epoch 0 (a global batch of
    8, seed 0): only that rank meets a bad file with IN_A_ROW - 1 more after it; rank 0 reads a
    few and uses their stand-ins."""
    from config.workloads.vision import ImageDataConfig, SyntheticImagesConfig
    from trainer.vision_data import IN_A_ROW, build_datasets

    shutil.copytree(image_folder, root)
    train, _, _ = build_datasets(ImageDataConfig(source=str(root), image_size=16), SyntheticImagesConfig(), seed=0)
    order = torch.randperm(len(train), generator=torch.Generator().manual_seed(0)).tolist()
    first = next(i for i in range(len(train) - IN_A_ROW + 1) if order.index(i) % 8 >= 4)
    for path, _ in train.samples[first:first + IN_A_ROW]:
        Path(path).write_bytes(b"<html>404 Not Found</html>" * 8)


def test_without_a_checkpoint_dir_a_rank_that_cannot_read_its_folder_stops_every_rank_naming_it_once(image_folder,
                                                                                                      tmp_path):
    """IN_A_ROW unreadable files in a row on rank 1, no --checkpoint-dir: before, rank 1 stopped
    alone inside its step (exit 2) and rank 0 met a broken collective ('another rank of the run
    stopped first', exit 1, which torchrun restarts on into the same folder). Now both stop at the
    same step, LAG_STEPS after the one rank 1 met it in, and exit 2; rank 1 names --data, the folder
    and the files in a row, and rank 0 points at rank 1."""
    from trainer.late_read import LAG_STEPS
    from trainer.vision_data import IN_A_ROW

    data = tmp_path / "data"
    unreadable_in_a_row_on_rank_1(image_folder, data)
    args = ["--data", str(data), "--image-size", "16", "--batch-size", "4", "--workers", "0", "--epochs", "1",
            "--lr", "0.2", "--warmup-epochs", "0", "--log-every", "1", "--dist-timeout", "60"]
    rc, out = run(torchrun_args("trainer.vision", args), timeout=120)
    assert rc == TORCHRUN_FAILED, out[-3000:]
    errors = sorted(line for line in out.splitlines() if line.startswith("error:"))
    assert len(errors) == 2, out[-3000:]
    m = re.fullmatch(rf"error: --data: {IN_A_ROW} files in a row of {re.escape(str(data))} could not be read on "
                     r"rank 1 in step (\d+) \(a volume gone or a wrong folder\?\); this rank's warnings name "
                     rf"{IN_A_ROW - 1} of them; every rank stopped at step (\d+) with no checkpoint \(no "
                     r"--checkpoint-dir\)", errors[0])
    assert m and int(m[2]) == min(int(m[1]) + LAG_STEPS, 6), out[-3000:]  # 6 steps an epoch: its last reads at once
    assert errors[1] == (f"error: rank 1 could not read the training data (its log says why); every rank stopped at "
                         f"step {m[2]} with no checkpoint (no --checkpoint-dir)"), out[-3000:]
    assert "traceback follows" not in out and "failed unexpectedly" not in out, out[-3000:]
    assert dict(re.findall(r"^\s*rank\s*: (\d) .*\n\s*exitcode\s*: (-?\d+) ", out, re.M)) == {"0": "2", "1": "2"}, \
        out[-3000:]


def test_a_micro_batch_no_gpu_decoder_can_decode_stops_every_rank_at_one_step_naming_the_data(
        make_image_folder, tmp_path):
    """Rank 1's whole micro-batch of step S passes the loader's checks and does not decode (DALI
    fails on it, and nvImageCodec, decoding it again, stands in for nothing): not a few bad files.
    Before, rank 1 raised the decode's error in its decode-ahead thread, a traceback, while rank 0
    met a broken collective and nothing was saved; now every rank stops as for a folder gone."""
    from PIL import Image

    from config.workloads.vision import ImageDataConfig, SyntheticImagesConfig
    from test_vision_decode import undecodable_jpeg
    from trainer.late_read import LAG_STEPS
    from trainer.vision_data import build_datasets

    data, ck = tmp_path / "data", tmp_path / "ck"
    make_image_folder(data, train=48, val=4)
    train, _, _ = build_datasets(ImageDataConfig(source=str(data), image_size=16), SyntheticImagesConfig(), seed=0)
    order, step = torch.randperm(len(train), generator=torch.Generator().manual_seed(0)).tolist(), 3
    first = None
    for index in order[(step - 1) * 8 + 4:step * 8]:  # rank 1's micro-batch of step 3 (folder_whose_volume_goes...)
        path, jpeg = Path(train.samples[index][0]), io.BytesIO()
        with Image.open(path) as image:
            image.save(jpeg, format="JPEG")
        path.write_bytes(undecodable_jpeg(jpeg.getvalue()))  # decoders read the content, whatever the name
        first = first or path
    args = ["--data", str(data), "--image-size", "16", "--batch-size", "4", "--workers", "2", "--epochs", "1",
            "--lr", "0.2", "--warmup-epochs", "0", "--log-every", "1", "--max-bad-images", "1000",
            "--checkpoint-every", "1000", "--dist-timeout", "120", "--decode", "dali", "--checkpoint-dir", str(ck)]
    rc, out = run(torchrun_args("trainer.vision", args), timeout=120)
    assert rc == TORCHRUN_FAILED, out[-3000:]
    stopped = f"every rank stopped at step {step + LAG_STEPS} with the checkpoint of step {step - 1}, the last step " \
              "before it"
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    [cause] = [line for line in errors if line.startswith("error: --data: none of the 4 images of a micro-batch")]
    assert cause.endswith(f"(--decode cpu decodes with PIL), on rank 1 in step {step}; {stopped}"), cause
    assert sorted(errors) == sorted([cause, f"error: rank 1 could not read the training data (its log says why); "
                                            f"{stopped}"]), out[-3000:]
    assert dict(re.findall(r"^\s*rank\s*: (\d) .*\n\s*exitcode\s*: (-?\d+) ", out, re.M)) == {"0": "2", "1": "2"}, \
        out[-3000:]
    assert "traceback follows" not in out and "OSError" not in out.replace(cause, ""), out[-3000:]  # no crash report
    assert list_steps(ck) == [step - 1]


def test_a_validation_folder_that_cannot_be_read_stops_every_rank_after_saving_the_epochs_training(image_folder,
                                                                                                      tmp_path):
    """Every file of val/ unreadable (loader processes read it): before, each rank's evaluation
    raised FolderUnreadable, and the rank that met it first stopped alone. Now each rank ends its
    share of the evaluation, meets the all-reduce, and every rank stops with exit 2, each naming
    what it met in one line, the epoch saved as trained, not evaluated: the resume on the repaired
    folder evaluates it again."""
    from trainer.vision_data import IN_A_ROW

    data, ck = tmp_path / "data", tmp_path / "ck"
    shutil.copytree(image_folder, data)
    val = sorted((data / "val").rglob("*.png"))
    for path in val:
        shutil.copy(path, path.with_suffix(".orig"))
        path.write_bytes(b"<html>404 Not Found</html>" * 8)
    args = ["--data", str(data), "--image-size", "16", "--batch-size", "4", "--workers", "2", "--epochs", "1",
            "--lr", "0.2", "--warmup-epochs", "0", "--log-every", "1", "--dist-timeout", "60",
            "--checkpoint-dir", str(ck), "--checkpoint-every", "1000"]
    rc, out = run(torchrun_args("trainer.vision", args), timeout=120)
    assert rc == TORCHRUN_FAILED, out[-3000:]
    errors = sorted(line for line in out.splitlines() if line.startswith("error:"))
    assert errors == [f"error: --data: {IN_A_ROW} files in a row of {data} could not be read on rank {rank} in epoch "
                      f"0's evaluation (a volume gone or a wrong folder?); this rank's warnings name {IN_A_ROW - 1} "
                      "of them; every rank stopped at step 6 with the checkpoint of step 6, the epoch's training (a "
                      "resume evaluates it again)" for rank in (0, 1)], out[-3000:]
    assert dict(re.findall(r"^\s*rank\s*: (\d) .*\n\s*exitcode\s*: (-?\d+) ", out, re.M)) == {"0": "2", "1": "2"}, \
        out[-3000:]
    assert list_steps(ck) == [6] and "epoch 0 done" not in out, out[-3000:]

    for path in val:
        shutil.copy(path.with_suffix(".orig"), path)
    rc, out = run(torchrun_args("trainer.vision", args), timeout=120)
    assert rc == 0, out[-3000:]
    assert starts(out) == [(2, 0, 48, 6)] and "epoch 0 done" in out, out[-3000:]


def test_the_validation_two_ranks_report_is_that_of_the_model_they_save(tmp_path):
    # BatchNorm's running statistics are updated by each rank's own micro-batches; DDP broadcasts
    # rank 0's only at the next training forward. Every rank must evaluate the buffers the
    # checkpoint holds, or the reported accuracy belongs to no saved model (and to the world size).
    import torch.distributed.checkpoint as dcp

    from trainer.checkpoint import ModelAndOptimizer
    from trainer.dist import Runtime
    from trainer.optim import build_sgd
    from trainer.vision import evaluate, parse_job
    from trainer.vision_data import UnreadableImages, build_datasets, val_loader
    from trainer.vision_input import device_input
    from trainer.vision_model import build_classifier

    argv = vision(tmp_path, "--metrics-file", str(tmp_path / "m.jsonl"), every=100)
    rc, out = run(torchrun_args("trainer.vision", argv, nproc=2), timeout=300)
    assert rc == 0, out
    reported = [r for r in map(json.loads, (tmp_path / "m.jsonl").read_text().splitlines()) if r["kind"] == "epoch"]
    assert len(reported) == 1
    job = parse_job(argv)
    _, val_set, classes = build_datasets(job.data, job.synthetic, job.seed)
    model = build_classifier(job.model, classes)
    dcp.load({"app": ModelAndOptimizer(model, build_sgd(model, job.optimizer))},
             checkpoint_id=str(step_dir(tmp_path, reported[0]["step"])))
    unreadable = UnreadableImages(job.data.max_bad_images, rank=0)
    cpu = torch.device("cpu")
    loader = val_loader(val_set, job.data, batch_size=BATCH, rank=0, world_size=1, pin=False, unreadable=unreadable)
    saved = evaluate(model, loader, device_input(job.data, cpu, unreadable),
                     Runtime(rank=0, world_size=1, local_rank=0, device=cpu, backend="gloo"))
    assert saved["val_images"] == reported[0]["val_images"] == 64
    assert saved["top1"] == reported[0]["top1"]
    assert saved["val_loss"] == pytest.approx(reported[0]["val_loss"], abs=1e-4)


def folder_whose_volume_goes_for_rank_1_in_step(make_image_folder, root) -> tuple[int, list[Path]]:
    """An ImageFolder root (96 training images, a global batch of 8, seed 0: 12 steps an epoch) in
    which IN_A_ROW training images in a row of the dataset's order are unreadable, the first of them
    one that rank 1 of 2 reads in step S >= 3 and none of them read in an earlier step: steps 1 to
    S - 1 train on the images themselves, as a run on the intact folder does, and only rank 1 meets
    the whole run (rank 0 meets a few and uses their stand-ins). Returns S and the files made
    unreadable; their intact bytes are kept beside each as .orig."""
    from config.workloads.vision import ImageDataConfig, SyntheticImagesConfig
    from trainer.vision_data import IN_A_ROW, build_datasets

    make_image_folder(root, train=48, val=4)
    train, _, _ = build_datasets(ImageDataConfig(source=str(root), image_size=16), SyntheticImagesConfig(), seed=0)
    n, order = len(train), torch.randperm(len(train), generator=torch.Generator().manual_seed(0)).tolist()
    step, first = next((s, x) for s in range(3, 10) for x in order[(s - 1) * 8 + 4:s * 8]
                       if not {(x + k) % n for k in range(IN_A_ROW)} & set(order[:(s - 1) * 8]))
    bad = [Path(train.samples[(first + k) % n][0]) for k in range(IN_A_ROW)]
    for path in bad:
        shutil.copy(path, path.with_suffix(".orig"))
        path.write_bytes(b"<html>404 Not Found</html>" * 8)
    return step, bad


LOSS = re.compile(r"^step\s+(\d+) \| epoch \d+ \| loss (\S+) ", re.M)


@pytest.mark.parametrize("workers, periodic, decode", [("0", False, "cpu"), ("2", True, "cpu"), ("2", False, "dali")])
def test_a_rank_whose_folder_cannot_be_read_stops_every_rank_at_one_step_after_saving_the_step_before(
        make_image_folder, tmp_path, workers, periodic, decode):
    """IN_A_ROW unreadable files in a row on rank 1 in step S: before, that rank alone stopped
    (exit 2) inside the step, its peer met a broken collective (exit 1, 'another rank stopped
    first') and nothing was saved, so the work since the last checkpoint was lost. Now the step
    and the LAG_STEPS steps until every rank learns of it (the preemption flag) are skipped on
    every rank, all ranks stop at the same step with exit 2 (permanent: the restart would read the
    same folder), the checkpoint of step S - 1, the last complete step, is saved (a periodic save
    due in between is not: it would hold skipped steps as trained), rank 1 names the cause in one
    line, and the run resumed on the repaired folder logs the losses of a run that never stopped.
    With loader processes the error reaches the step loop from a process a few batches ahead; with a
    GPU decoder (here DALI's CPU operators) through its decode-ahead thread."""
    from trainer.late_read import LAG_STEPS
    from trainer.vision_data import IN_A_ROW

    data, ck = tmp_path / "data", tmp_path / "ck"
    step, bad = folder_whose_volume_goes_for_rank_1_in_step(make_image_folder, data)
    stop = step + LAG_STEPS
    args = ["--data", str(data), "--image-size", "16", "--batch-size", "4", "--workers", workers, "--epochs", "1",
            "--lr", "0.2", "--warmup-epochs", "0", "--log-every", "1", "--max-bad-images", "1000",
            "--checkpoint-every", str(step + 1 if periodic else 1000), "--dist-timeout", "120", "--decode", decode]
    rc, out = run(torchrun_args("trainer.vision", [*args, "--checkpoint-dir", str(ck)]), timeout=120)
    assert rc == TORCHRUN_FAILED, out[-3000:]
    errors = [line for line in out.splitlines() if line.startswith("error:")]
    cause = (f"error: --data: {IN_A_ROW} files in a row of {data} could not be read on rank 1 in step {step} (a "
             f"volume gone or a wrong folder?); this rank's warnings name {IN_A_ROW - 1} of them; every rank stopped "
             f"at step {stop} with the checkpoint of step {step - 1}, the last step before it")
    assert errors.count(cause) == 1 and len(errors) == 2, out[-3000:]
    assert errors[1 - errors.index(cause)] == (
        f"error: rank 1 could not read the training data (its log says why); every rank stopped at step {stop} with "
        f"the checkpoint of step {step - 1}, the last step before it"), out[-3000:]
    assert dict(re.findall(r"^\s*rank\s*: (\d) .*\n\s*exitcode\s*: (-?\d+) ", out, re.M)) == {"0": "2", "1": "2"}, \
        out[-3000:]
    assert "traceback follows" not in out and "SIGTERM: checkpoint" not in out, out[-3000:]
    assert list_steps(ck) == [step - 1]

    for path in bad:  # the volume is back
        shutil.copy(path.with_suffix(".orig"), path)
    rc, out = run(torchrun_args("trainer.vision", [*args, "--checkpoint-dir", str(ck)]), timeout=120)
    assert rc == 0, out[-3000:]
    assert [int(s) for s in RESUMED.findall(out)] == [step - 1]
    assert starts(out) == [(2, 0, (step - 1) * 8, step - 1)]
    resumed = {int(s): loss for s, loss in LOSS.findall(out)}
    rc, out = run(torchrun_args("trainer.vision", [*args, "--checkpoint-dir", str(tmp_path / "whole")]), timeout=120)
    assert rc == 0, out[-3000:]
    whole = {int(s): loss for s, loss in LOSS.findall(out)}
    assert sorted(resumed) == list(range(step, 13)) and resumed == {s: whole[s] for s in resumed}, (resumed, whole)
