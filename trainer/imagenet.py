"""`python -m trainer.data imagenet --src DIR --out DIR`: the ILSVRC2012 layout into ImageFolder.

The input is ImageNet as the ILSVRC2012 classification-localisation release ships it (the Kaggle
"ImageNet Object Localization Challenge" copy): `LOC_synset_mapping.txt` (one `<wnid> <names>` line
per class, 1,000 lines), `LOC_val_solution.csv` (header `ImageId,PredictionString`; the first
token of PredictionString is the image's wnid), training images already in class folders
(`train/<wnid>/*.JPEG`) and validation images in one flat folder (`val/<ImageId>.JPEG`). The image
folders sit under `ILSVRC/Data/CLS-LOC/` in that release, or directly in --src.

The output is torchvision's ImageFolder layout, `OUT/train/<wnid>/` and `OUT/val/<wnid>/`. Files
are hard links where --src and --out share a file system (no second copy of 150 GB), copies
otherwise. Each lands under its final name only when complete (a link is atomic; a copy goes to a
temporary name and is renamed), so a run that is killed leaves nothing half-written, and the next
run skips what is already there.

With --reencode the images are instead written at a bounded size and an ordinary JPEG quality,
cheaper to decode every epoch (trainer/imagenet_reencode.py); without it nothing changes.
"""

from __future__ import annotations

import csv
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

from config.paths import PathProblem, creatable_dir, input_dir, is_dir
from trainer import imagenet_reencode
from trainer.cli import UsageError, checked_path, create_folder

EXPECTED_CLASSES = 1000
EXPECTED_VAL_IMAGES = 50_000
SYNSETS = "LOC_synset_mapping.txt"
VAL_SOLUTION = "LOC_val_solution.csv"
IMAGE_SUFFIX = ".JPEG"
_WNID = re.compile(r"^n\d{8}$")
_IMAGE_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


@dataclass
class Report:
    classes: int = 0
    train_images: int = 0
    val_images: int = 0
    val_listed: int = 0
    val_missing: list[str] = field(default_factory=list)
    linked: int = 0
    copied: int = 0
    present: int = 0
    reencoded: int = 0

    def lines(self, out: Path) -> list[str]:
        lines = [
            f"ImageFolder at {out}: {self.classes:,} classes (expected {EXPECTED_CLASSES:,}), "
            f"{self.train_images:,} training images, {self.val_images:,} validation images "
            f"(expected {EXPECTED_VAL_IMAGES:,}; {self.val_listed:,} listed in {VAL_SOLUTION})",
            f"  {self.linked:,} linked, {self.copied:,} copied, {self.present:,} already in place",
        ]
        if self.reencoded:
            lines[1] = f"  {self.reencoded:,} re-encoded,{lines[1][1:]}"

        if self.val_missing:
            lines.append(f"  {len(self.val_missing):,} listed validation images are not in val/, "
                         f"e.g. {self.val_missing[0]}")
        if self.classes != EXPECTED_CLASSES or self.val_images != EXPECTED_VAL_IMAGES:
            lines.append("  this is not the full ILSVRC2012 set")
        return lines


def image_root(src: Path) -> Path:
    nested = src / "ILSVRC" / "Data" / "CLS-LOC"
    return nested if nested.is_dir() else src


def _metadata_file(src: Path, name: str) -> Path:
    for folder in (src, image_root(src)):
        if (folder / name).is_file():
            return folder / name
    raise UsageError("--src", f"{src} has no {name} (the ILSVRC2012 release ships it beside ILSVRC/)")


def _text_lines(path: Path):
    """The lines of a UTF-8 text file, numbered from 1, line ends kept; one line of error for
    anything else. Decoded line by line, so an error names its line."""
    number = 0
    try:
        with path.open("rb") as f:
            for number, line in enumerate(f, 1):
                yield number, line.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError("--src", f"{path}:{number}: not UTF-8 text ({exc.reason})") from None
    except OSError as exc:
        raise UsageError("--src", f"{path}: unreadable ({exc.strerror or exc})") from None


def read_synsets(path: Path) -> list[str]:
    wnids = []
    for number, line in _text_lines(path):
        if not line.strip():
            continue
        wnid = line.split(maxsplit=1)[0]
        if not _WNID.match(wnid):
            raise UsageError("--src", f"{path}:{number}: expected '<wnid> <names>' with a wnid like n01440764, "
                                      f"got {line.strip()[:60]!r}")
        wnids.append(wnid)
    if not wnids:
        raise UsageError("--src", f"{path} lists no classes")
    return wnids


def read_val_solution(path: Path, wnids: set[str]) -> dict[str, str]:
    """ImageId -> wnid: the first token of each PredictionString."""
    labels: dict[str, str] = {}
    rows = csv.reader(line for _, line in _text_lines(path))
    try:
        header = next(rows, None)
        if header != ["ImageId", "PredictionString"]:
            raise UsageError("--src", f"{path}:1: expected the header ImageId,PredictionString, got {header}")
        for number, row in enumerate(rows, 2):
            tokens = row[1].split() if len(row) == 2 else []
            if not tokens or not _IMAGE_ID.match(row[0]):
                raise UsageError("--src", f"{path}:{number}: expected ImageId,<wnid> <box>..., got {','.join(row)[:60]!r}")
            if tokens[0] not in wnids:
                raise UsageError("--src", f"{path}:{number}: {tokens[0]!r} is not a class of {SYNSETS}")
            labels[row[0]] = tokens[0]
    except csv.Error as exc:
        raise UsageError("--src", f"{path}:{rows.line_num}: not CSV ({exc})") from None
    return labels


def _listing(folder: Path) -> list[Path]:
    """The folder's entries; one this user may not enter or list is named (iterdir raised)."""
    return list(checked_path("--src", input_dir, folder).iterdir())


def plan(src: Path, out: Path) -> tuple[list[tuple[Path, Path]], Report]:
    """Every (source image, ImageFolder path) pair, and the counts found."""
    root = image_root(src)
    wnids = read_synsets(_metadata_file(src, SYNSETS))
    labels = read_val_solution(_metadata_file(src, VAL_SOLUTION), set(wnids))
    for part in ("train", "val"):
        if not (root / part).is_dir():
            raise UsageError("--src", f"{root} has no {part}/ folder")
    report, pairs = Report(val_listed=len(labels)), []
    known = set(wnids)
    for class_dir in sorted(p for p in _listing(root / "train") if p.is_dir()):
        if class_dir.name not in known:
            raise UsageError("--src", f"{class_dir} is not a class of {SYNSETS}")
        images = sorted(p for p in _listing(class_dir) if p.name.endswith(IMAGE_SUFFIX))
        pairs += [(p, out / "train" / class_dir.name / p.name) for p in images]
        report.classes += 1
        report.train_images += len(images)
    val_files = {p.name[:-len(IMAGE_SUFFIX)]: p for p in _listing(root / "val")
                 if p.is_file() and p.name.endswith(IMAGE_SUFFIX)}
    unlisted = sorted(set(val_files) - set(labels))
    if unlisted:
        raise UsageError("--src", f"{val_files[unlisted[0]]} is not listed in {VAL_SOLUTION} "
                                  f"({len(unlisted)} validation images are not)")
    for image_id, wnid in sorted(labels.items()):
        if image_id in val_files:
            pairs.append((val_files[image_id], out / "val" / wnid / val_files[image_id].name))
            report.val_images += 1
        else:
            report.val_missing.append(image_id)
    return pairs, report


def rearrange(src: Path, out: Path, reencode=None, workers: int = 1) -> Report:
    """The release at `src` into an ImageFolder at `out`: linked or copied, or with `reencode`
    (trainer.imagenet_reencode.Settings) re-encoded by `workers` processes."""
    from tqdm import tqdm

    if not checked_path("--src", is_dir, src):
        raise UsageError("--src", f"{src} is not a folder")
    pairs, report = plan(src, out)
    create_folder(out, "--out")
    if reencode is not None:
        imagenet_reencode.reencode(pairs, out, reencode, workers, report)
        return report
    imagenet_reencode.claim(out, None)
    for source, target in tqdm(pairs, desc="imagenet", unit="img", file=sys.stderr, mininterval=5):
        try:
            outcome = imagenet_reencode.place(source, target)
            setattr(report, outcome, getattr(report, outcome) + 1)
        except PathProblem as problem:
            raise UsageError("--src", str(problem)) from None
        except OSError as exc:  # every file already placed is whole: a rerun goes on from there
            if str(exc.filename) == str(source):
                raise UsageError("--src", f"cannot read {source}: {exc.strerror or exc}") from None
            raise UsageError("--out", f"cannot write {target}: {exc.strerror or exc}") from None
    return report


def add_parser(sub, formatter_class, error) -> None:
    p = sub.add_parser("imagenet", help="ILSVRC2012 train/ and flat val/ into ImageFolder class folders",
                       formatter_class=formatter_class)
    p.error = error
    p.add_argument("--src", required=True, help="the ILSVRC2012 release (LOC_*.txt/csv and ILSVRC/Data/CLS-LOC/)")
    p.add_argument("--out", required=True, help="ImageFolder root to fill (train/ and val/)")
    r = imagenet_reencode
    presets = r.imagenet_presets()
    p.add_argument("--reencode", action="store_true",
                   help="write each image at a bounded size and ordinary JPEG quality, cheaper to decode every "
                        "epoch (opt-in; without it images are linked or copied unchanged)")
    p.add_argument("--short-side", type=int, default=None, metavar="PX",
                   help="--reencode: larger images are scaled to this short side (default: the preset's "
                        f"evaluation resize x {r.DEFAULT_MARGIN}: " + ", ".join(
                            f"{r.default_short_side(size)} for {name}" for name, size in presets.items()) + ")")
    p.add_argument("--jpeg-quality", type=int, default=None, metavar="Q",
                   help=f"--reencode: JPEG quality, {r.QUALITY_RANGE[0]}-{r.QUALITY_RANGE[1]} "
                        f"(default {r.DEFAULT_QUALITY}); chroma subsampled {r.SUBSAMPLING}")
    p.add_argument("--preset", choices=sorted(presets), default=None,
                   help="--reencode: the job the copy is for; its crop bounds --short-side from below "
                        "(default resnet50-imagenet)")
    p.add_argument("--workers", type=int, default=None,
                   help=f"--reencode: processes (1-{r.MAX_WORKERS}; default: the CPUs, at most 32)")


def _reencode_settings(args):
    """(settings or None, workers) from the command line; the re-encode flags only with --reencode."""
    r = imagenet_reencode
    given = [flag for flag, value in (("--short-side", args.short_side), ("--jpeg-quality", args.jpeg_quality),
                                      ("--workers", args.workers), ("--preset", args.preset)) if value is not None]
    if not args.reencode:
        if given:
            raise UsageError(given[0], "only applies with --reencode")
        return None, 1
    workers = r.default_workers() if args.workers is None else args.workers
    if not 1 <= workers <= r.MAX_WORKERS:
        raise UsageError("--workers", f"must be 1 to {r.MAX_WORKERS}, got {workers}")
    return r.settings_for(args.short_side, args.jpeg_quality, args.preset or "resnet50-imagenet"), workers


def run(args) -> int:
    src, out = Path(args.src), Path(args.out)
    settings, workers = _reencode_settings(args)
    checked_path("--out", creatable_dir, out)  # before reading 1.3 million file names from --src
    report = rearrange(src, out, settings, workers)
    print("\n".join(report.lines(out)))
    return 0
