"""Image data for trainer.vision: a learnable synthetic set or an ImageFolder root, a sampler whose
position is global (so it resumes on another number of ranks), and the loaders.

The sampler is DistributedSampler's own shuffle (one permutation per epoch, seeded by seed + epoch,
the same for any world size) with the first `start` samples of it skipped. A step consumes the
next global batch G of that order; rank r of W takes its r-th contiguous run of G/W images, in
micro-batches of --batch-size, so every world size cuts the same micro-batches (and BatchNorm sees
the same batches): after s steps the job has consumed exactly the first s·G positions, whatever W
was. That global index is all a checkpoint stores.

Random augmentations draw from a generator seeded by (seed, epoch, image index) for each image:
they differ between images, ranks and epochs, and an image gets the same crop in an epoch whatever
the world size, the number of loader workers, or a resume in between. (Before, every rank seeded
its loader workers alike, and all ranks drew the same sequence of crops.)
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
from pathlib import Path

import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler

from config.paths import PathProblem, is_dir, walk
from config.workloads.vision import GPU_DECODERS, ImageDataConfig, SyntheticImagesConfig
from trainer import dist as tdist
from trainer.cli import UsageError, WorkerExit, checked_path
from trainer.encoded_images import EncodedImages
from trainer.imagenet_reencode import check_serves
from trainer.log import log
from trainer.torchvision_compat import import_torchvision
from trainer.vision_jpeg import ReducedRandomResizedCrop, ReducedResizeCenterCrop, open_image

# ImageNet's channel statistics, as torchvision's reference recipes use them.
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


class SyntheticImages(Dataset):
    """Each class is a fixed random low-resolution colour pattern, upsampled to the image size;
    an image is its class's pattern under noise, so the class is learnable but not trivial.
    Images are made on demand from (seed, index): nothing is held in memory or written."""

    def __init__(self, samples: int, classes: int, image_size: int, seed: int, *, split_offset: int = 0,
                 noise: float = 1.0, flip: bool = True):
        g = torch.Generator().manual_seed(seed)
        low = torch.randn(classes, 3, 4, 4, generator=g)
        self.patterns = torch.nn.functional.interpolate(low, size=(image_size, image_size), mode="bilinear",
                                                        align_corners=False)
        self.samples, self.classes, self.seed = samples, classes, seed
        self.split_offset, self.noise, self.flip = split_offset, noise, flip

    def __len__(self) -> int:
        return self.samples

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        g = torch.Generator().manual_seed((self.seed * 1_000_003 + self.split_offset + index) % 2**63)
        label = int(torch.randint(self.classes, (1,), generator=g))
        image = self.patterns[label] + self.noise * torch.randn(self.patterns.shape[1:], generator=g)
        if self.flip and torch.rand(1, generator=g).item() < 0.5:  # the training recipe's horizontal flip
            image = image.flip(-1)
        return image, label


def transforms(image_size: int, *, reduce: bool = True):
    """The standard ImageNet pipelines up to uint8: random-resized crop and flip for training;
    resize to image_size/0.875 and a centre crop for evaluation. The loader processes stop at uint8
    (a quarter of fp32's bytes to collate, pin and copy); DeviceImages converts and normalises
    where the batch lands, on the GPU. A JPEG opened by vision_jpeg.open_image is decoded at
    reduced size where that changes no output pixel's source (trainer/vision_jpeg.py; `reduce`
    False: always in full, for the benchmark's comparison)."""
    T = import_torchvision().transforms
    to_uint8 = T.PILToTensor()
    train = T.Compose([ReducedRandomResizedCrop(image_size, reduce=reduce), T.RandomHorizontalFlip(), to_uint8])
    val = T.Compose([ReducedResizeCenterCrop(image_size, reduce=reduce), to_uint8])
    return train, val


class DeviceImages:
    """A batch to the device and into the model's input form there: uint8 images become float
    normalised by ImageNet's statistics with the very operations ToTensor and Normalize apply
    (x / 255, minus the mean, over the std), channels_last on GPU like the model. Float batches
    (synthetic data) are already the model's input and only move."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(STD, device=device).view(1, 3, 1, 1)

    def __call__(self, images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cuda:  # from pinned memory: the copy overlaps the previous step's kernels
            images, labels = images.to(self.device, non_blocking=True), labels.to(self.device, non_blocking=True)
            images = images.contiguous(memory_format=torch.channels_last)
        if images.dtype == torch.uint8:
            images = self.normalize(images)
        return images, labels

    def normalize(self, images: torch.Tensor) -> torch.Tensor:
        """uint8 (N, 3, H, W) on this device to the normalised float input; the layout is kept."""
        return images.float().div_(255).sub_(self.mean).div_(self.std)


def _ImageFolder(datasets):
    """torchvision's ImageFolder whose walk of the class folders is config.paths.walk: the same
    samples in the same order (a checkpoint's data position indexes them), but a folder this user
    may not list is named rather than skipped (its images silently went untrained)."""
    class ImageFolder(datasets.ImageFolder):
        @staticmethod
        def make_dataset(directory, class_to_idx, extensions=None, is_valid_file=None, allow_empty=False):
            valid = is_valid_file or (lambda path: datasets.folder.has_file_allowed_extension(path, extensions))
            samples, empty = [], []
            for name in sorted(class_to_idx):
                found = [(path, class_to_idx[name])
                         for folder, _, files in sorted(walk(os.path.join(directory, name), follow_symlinks=True))
                         for path in (os.path.join(folder, file) for file in sorted(files)) if valid(path)]
                samples += found
                empty += [] if found else [name]
            if empty and not allow_empty:
                raise FileNotFoundError(f"Found no valid file for the classes {', '.join(empty)}")
            return samples

    return ImageFolder


def build_datasets(cfg: ImageDataConfig, synthetic: SyntheticImagesConfig, seed: int) -> tuple[Dataset, Dataset, int]:
    """(train, val, number of classes)."""
    if cfg.source == "synthetic":
        return (SyntheticImages(synthetic.train_samples, synthetic.classes, cfg.image_size, seed),
                SyntheticImages(synthetic.val_samples, synthetic.classes, cfg.image_size, seed, split_offset=10**9,
                                flip=False),
                synthetic.classes)
    root = Path(cfg.source)
    for split in ("train", "val"):
        if not checked_path("--data", is_dir, root / split):
            raise UsageError("--data", f"expected 'synthetic' or a folder with train/ and val/ class folders; "
                                       f"{root / split} is not a directory")
    check_serves(root, cfg.image_size)  # a re-encoded copy (trainer.data imagenet --reencode) too small for the crop
    datasets = import_torchvision().datasets
    train_tf, val_tf = transforms(cfg.image_size)
    try:
        train = _ImageFolder(datasets)(root / "train", train_tf, loader=open_image)
        val = _ImageFolder(datasets)(root / "val", val_tf, loader=open_image)
    except PathProblem as problem:
        raise UsageError("--data", str(problem)) from None
    except (FileNotFoundError, OSError) as exc:
        raise UsageError("--data", f"{root} is not an ImageFolder dataset ({exc})") from None
    if train.classes != val.classes:
        raise UsageError("--data", f"{root}/train has {len(train.classes)} class folders and {root}/val "
                                   f"{len(val.classes)}; they must name the same classes")
    if cfg.decode in GPU_DECODERS:  # the loaders read bytes and draw crops; the GPU decodes
        train = EncodedImages(train.samples, train.classes, train=True)
        val = EncodedImages(val.samples, val.classes, train=False)
    return train, val, len(train.classes)


class ElasticSampler(DistributedSampler):
    """DistributedSampler (set_epoch, the same shuffle on every rank) that starts `start` samples
    into the epoch's global order and drops the tail that does not fill a global batch. Yields
    (epoch, index) keys, which SeededAugmentation turns into the image and its augmentation seed."""

    def __init__(self, dataset: Dataset, *, num_replicas: int, rank: int, global_batch: int, seed: int):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=True)
        if global_batch % num_replicas:
            raise ValueError(f"global batch {global_batch} is not a multiple of {num_replicas} ranks")
        self.global_batch, self.start = global_batch, 0

    def set_position(self, epoch: int, start: int) -> None:
        self.set_epoch(epoch)
        self.start = start

    def steps(self) -> int:
        """Steps left in this epoch from the current position."""
        return max(0, len(self.dataset) - self.start) // self.global_batch

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed + self.epoch)
        order = torch.randperm(len(self.dataset), generator=g).tolist()
        share = self.global_batch // self.num_replicas
        for step in range(self.steps()):
            first = self.start + step * self.global_batch + self.rank * share
            yield from ((self.epoch, i) for i in order[first:first + share])

    def __len__(self) -> int:
        return self.steps() * self.global_batch // self.num_replicas


class SeededAugmentation(Dataset):
    """The training set (Substitutes) read by (epoch, index) keys: each image is loaded and augmented
    under the process's CPU generator seeded by (seed, epoch, index), and the generator's state is
    restored after, so the training process's own random draws (dropout) do not depend on the images."""

    def __init__(self, dataset: Dataset, seed: int):
        self.dataset, self.seed = dataset, seed

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, key: tuple[int, int]):
        epoch, index = key
        with torch.random.fork_rng(devices=[]):
            torch.random.default_generator.manual_seed(
                ((self.seed * 1_000_003 + epoch) * 1_000_000_007 + index) % 2**63)
            return self.dataset[key]  # Substitutes: the epoch is the one a bad file counts in


# Files tried for one image before the rank stops: that many unreadable in a row is no longer
# a few bad files but data that cannot be read (a volume gone, a wrong folder).
IN_A_ROW = 16


class FolderUnreadable(Exception):
    """IN_A_ROW files in a row could not be read (the last one's error is its cause). Raised in a
    loader process, it reaches the training process as its own type (torch re-raises a loader
    process's exception as its type, built from one argument, the process's traceback as its text),
    where trainer.vision records it (UnreadableImages.folder_gone) and every rank stops at an agreed
    step; UsageError, which takes two, would come back as a RuntimeError."""

    problem: tuple[str, str] | None = None  # (argument, what was met) where it is not IN_A_ROW files


class DecoderStopped(FolderUnreadable):
    """A GPU decoder's micro-batches this rank cannot go on with (none of a micro-batch decoded;
    DALI failing on good files): raised in the training process's decode-ahead thread, and stopped
    on as FolderUnreadable is, every rank at an agreed step after a save, the line naming
    `argument` and `what`, not IN_A_ROW unreadable files."""

    def __init__(self, argument: str, what: str):
        super().__init__(f"{argument}: {what}")
        self.problem = (argument, what)


def unreadable_errors() -> tuple[type[BaseException], ...]:
    """What reading an image raises when the file is bad: PIL's UnidentifiedImageError (not an image)
    and a truncated or broken stream are OSErrors, as a missing or unreadable file is; a malformed PNG
    chunk is a SyntaxError, a bad header field a ValueError, a pixel count past PIL's limit a
    DecompressionBombError. Anything else is a fault of ours and is raised."""
    from PIL import Image
    return OSError, SyntaxError, ValueError, Image.DecompressionBombError


class UnreadableImages:
    """The images of this rank's epoch that could not be read, counted in shared memory by all its
    loader processes, against --max-bad-images: check() raises once they are more.

    An epoch's count holds its training images and its evaluation's. The next epoch's loader
    processes start reading while this one evaluates (trainer.vision), so each read is counted in
    the epoch it is for: a training read passes its epoch (the sampler's key), anything else (the
    evaluation's loader, a GPU decoder in the training process) counts in the epoch the training
    process is in. Two epochs are open at most, so two counters, by the epoch's parity.

    Only this rank knows its count, and a rank that stopped alone left the others in the step's
    collectives (for the collective timeout, or a traceback once its socket closed). So the step
    loop (trainer.vision) asks over_limit() after each step, on the host, and sends the answer on
    the preemption flag's all-reduce (trainer/preemption.py BAD_DATA): every rank reads it
    LAG_STEPS steps later, or at once at the epoch's last step and after its evaluation, saves that
    step as on preemption and raises the lowest such rank's line (raise_agreed_problem). The loader
    processes read ahead (several micro-batches, and the next epoch's first during this one's
    evaluation), so the count can pass the limit before the step that trains on the file that
    passed it; the run stops within LAG_STEPS steps of the first step whose check saw the count
    past it. The steps between train on stand-ins (the next readable image) like every step with
    a bad image: the checkpoint holds them, and a resume continues from it. An evaluation past the
    limit is not counted as done: the checkpoint's position is the end of the epoch's training,
    so a resume evaluates it again."""

    def __init__(self, limit: int, *, rank: int = 0):
        self.limit, self.rank = limit, rank
        self.counts = multiprocessing.Array("q", 2)
        self.epoch = multiprocessing.Value("q", 0)  # the epoch the training process trains or evaluates
        self.found: str | None = None  # the line of the first check that saw the count past the limit
        self.gone: str | None = None  # where this rank's reads met FolderUnreadable ("in step 7")
        self.gone_step: int | None = None  # the training step it was met in (None: in an evaluation, or never)
        self.gone_problem: tuple[str, str] | None = None  # a DecoderStopped's (argument, what)

    def reading(self, epoch: int) -> None:
        """Epoch `epoch`'s loader is about to read its first image: its count starts at 0 (the
        counter last held epoch - 2's, which is over)."""
        self.counts[epoch % 2] = 0

    def epoch_start(self, epoch: int) -> None:
        """The training process trains epoch `epoch` from here, then evaluates it."""
        self.epoch.value = epoch

    def met(self, name: str, error: BaseException, instead: str, *, epoch: int | None = None) -> None:
        """Count one unreadable image and name it on stderr with the reason and what takes its place
        (the loader's Substitutes and the GPU decoders' vision_decode.stand_ins both report here).
        `epoch`: the epoch the image was read for, where the reader knows it (the training loader)."""
        epoch = self.epoch.value if epoch is None else epoch
        with self.counts.get_lock():
            self.counts[epoch % 2] += 1
        # The epoch is named: the next epoch's reads start during this one's evaluation, so its
        # warnings can come before this epoch's evaluation line.
        log(f"warning: cannot read {name} ({type(error).__name__}: {error}) in epoch {epoch}; {instead} is used in "
            "its place (--max-bad-images)", sys.stderr)

    def this_epoch(self) -> int:
        return self.counts[self.epoch.value % 2]

    def problem(self) -> str | None:
        """The line that says this epoch's count on this rank is past the limit; None within it."""
        count = self.this_epoch()
        if count <= self.limit:
            return None
        return (f"{count} images of epoch {self.epoch.value} could not be read on rank {self.rank}, more than the "
                f"{self.limit} allowed; that rank's warnings name each file (replace or remove them, or raise the "
                "limit)")

    def over_limit(self) -> bool:
        """True once a call saw this rank's count past the limit (its line kept in `found`). Shared
        memory read on the host: no collective, no wait for the device."""
        self.found = self.found or self.problem()
        return self.found is not None

    def folder_gone(self, where: str, *, step: int | None = None, problem: tuple[str, str] | None = None) -> None:
        """This rank's loader raised FolderUnreadable `where`: in training step `step` (trainer.vision
        then skips that step and every later one on every rank, and saves the one before), or in an
        evaluation. It rides on the preemption flag as the limit does (over_limit's callers).
        `problem`: the (argument, what) of a DecoderStopped, said instead of IN_A_ROW files."""
        if self.gone is None:
            self.gone, self.gone_step, self.gone_problem = where, step, problem

    def agree_gone(self) -> tuple[int | None, list[int]]:
        """On every rank at once (one collective, made only when the ranks stop):
        the first training step any rank's data was gone in (None: none, or only in an
        evaluation), and the ranks whose data was gone."""
        mine = [(self.gone_step, self.gone is not None)]
        everyone = mine
        if torch.distributed.is_initialized():
            everyone = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(everyone, mine[0])
        steps = [step for step, _ in everyone if step is not None]
        return min(steps, default=None), [rank for rank, (_, gone) in enumerate(everyone) if gone]

    def raise_gone(self, ranks: list[int], source: str, stopped: str) -> None:
        """On every rank at once, when agree_gone named `ranks`: a rank among them raises UsageError
        naming --data and what it met, any other WorkerExit with EXIT_USAGE pointing at them, so
        that every pod exits with the same permanent status and the cause is said once, where it
        was seen. `stopped`: where the ranks stopped and what the checkpoints hold."""
        from config.kubernetes import EXIT_USAGE

        if self.gone_problem is not None:
            argument, what = self.gone_problem
            raise UsageError(argument, f"{what}, on rank {self.rank} {self.gone}; {stopped}")
        if self.gone is not None:
            raise UsageError("--data", f"{IN_A_ROW} files in a row of {source} could not be read on rank {self.rank} "
                                       f"{self.gone} (a volume gone or a wrong folder?); this rank's warnings name "
                                       f"{IN_A_ROW - 1} of them; {stopped}")
        if ranks:
            who, whose = (f"rank {ranks[0]}", "its log says") if len(ranks) == 1 else (
                f"ranks {', '.join(map(str, ranks))}", "their logs say")
            raise WorkerExit(f"{who} could not read the training data ({whose} why); {stopped}", EXIT_USAGE,
                             consequence=True)

    def raise_agreed_problem(self) -> None:
        """On every rank at once, when the agreed flag said BAD_DATA: UsageError with the lowest
        over-limit rank's line, the same on every rank."""
        found = tdist.lowest_ranks(self.found)
        if found is not None:
            raise UsageError("--max-bad-images", found)


class Substitutes(Dataset):
    """`dataset` where an image that cannot be read is replaced by the next readable one in the
    dataset's order, drawing the crop the bad one would have drawn: the same every time, so a
    resumed run sees what the first saw. Each is counted (UnreadableImages) and named on stderr;
    after IN_A_ROW unreadable files in a row FolderUnreadable is raised. A GPU decoder's loader reads only
    the file, its header and its end here (trainer.image_files.check_complete); a file that passes them
    and still fails to decode is replaced in the training process (vision_decode.stand_ins)."""

    def __init__(self, dataset: Dataset, unreadable: UnreadableImages):
        self.dataset, self.unreadable = dataset, unreadable

    def __len__(self) -> int:
        return len(self.dataset)

    def name(self, index: int) -> str:
        samples = getattr(self.dataset, "samples", None)
        return str(samples[index][0]) if samples is not None else f"image {index}"

    def __getitem__(self, key: int | tuple[int, int]):
        """`key`: an index, or the training loader's (epoch, index) (SeededAugmentation), whose
        epoch a bad file is counted in."""
        epoch, index = key if isinstance(key, tuple) else (None, key)
        errors = unreadable_errors()
        draws = torch.random.get_rng_state()  # the replacement draws the crop the bad image would have
        for attempt in range(IN_A_ROW - 1):
            i = (index + attempt) % len(self.dataset)
            try:
                return self.dataset[i]
            except errors as error:
                torch.random.set_rng_state(draws)
                self.unreadable.met(self.name(i), error, "the next image", epoch=epoch)
        i = (index + IN_A_ROW - 1) % len(self.dataset)
        try:
            return self.dataset[i]
        except errors as error:
            raise FolderUnreadable(f"{self.name(i)}: {type(error).__name__}: {error}") from error


def leave_sigterm_to_the_rank(worker_id: int) -> None:
    """Each loader process's start (worker_init_fn): SIGTERM ignored. torchrun forwards a
    preemption's SIGTERM to each rank's whole process group (os.killpg in torch's
    SubprocessHandler.close), its loader processes included. The rank finishes its step and saves
    a checkpoint (trainer/preemption.py); a loader process that died of the signal failed the rank
    first ("DataLoader worker ... is killed by signal: Terminated"), and nothing was saved. The
    rank still ends its loader processes when it exits, each also exits once its rank is gone
    (the DataLoader's watchdog), and SIGKILL at the end of the pod's grace period ends all."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def train_loader(dataset: Dataset, sampler: ElasticSampler, cfg: ImageDataConfig, *, batch_size: int, seed: int,
                 rank: int, pin: bool, unreadable: UnreadableImages) -> DataLoader:
    """Micro-batches of `batch_size` images in the sampler's order, loaded by cfg.workers processes
    (uint8 images, or for a GPU decoder the files' bytes and crops: the dataset's `collate`); an
    unreadable image is replaced by the next (Substitutes) and counted in `unreadable`."""
    # Worker processes are seeded from the loader's generator: one per rank, so that anything a
    # transform draws outside SeededAugmentation (Python's random, NumPy) differs between ranks too.
    return DataLoader(SeededAugmentation(Substitutes(dataset, unreadable), seed), batch_size=batch_size,
                      sampler=sampler, num_workers=cfg.workers, pin_memory=pin, persistent_workers=cfg.workers > 0,
                      drop_last=True, generator=torch.Generator().manual_seed(seed * 1_000_003 + rank),
                      collate_fn=getattr(dataset, "collate", None), worker_init_fn=leave_sigterm_to_the_rank)


def val_loader(dataset: Dataset, cfg: ImageDataConfig, *, batch_size: int, rank: int, world_size: int,
               pin: bool, unreadable: UnreadableImages) -> DataLoader:
    """Rank r evaluates images r, r+W, ...: every image once, none padded in, so the accuracy
    summed over ranks is exact (an unreadable one replaced by the next, which then counts twice)."""
    return DataLoader(Substitutes(dataset, unreadable), batch_size=batch_size,
                      sampler=list(range(rank, len(dataset), world_size)), num_workers=cfg.workers, pin_memory=pin,
                      persistent_workers=cfg.workers > 0, collate_fn=getattr(dataset, "collate", None),
                      worker_init_fn=leave_sigterm_to_the_rank)


class Progress:
    """The data position in global terms, which checkpoints hold: the epoch, and the images of it
    already consumed by the whole job (not per rank), plus the images seen in all (the schedule's
    clock). A resume on any number of ranks continues from it."""

    def __init__(self):
        self.epoch, self.epoch_images_done, self.images_seen = 0, 0, 0

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "epoch_images_done": self.epoch_images_done, "images_seen": self.images_seen}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.epoch_images_done = int(state["epoch"]), int(state["epoch_images_done"])
        self.images_seen = int(state["images_seen"])
