"""A tiny dataset in the ILSVRC2012 release's layout, for the tests of `trainer.data imagenet` and the data Job.

`write_tiny_ilsvrc(root, classes=3, train_per_class=2, val_per_class=2)` writes
LOC_synset_mapping.txt, LOC_val_solution.csv and ILSVRC/Data/CLS-LOC/{train/<wnid>/,val/} with
small placeholder files named as the release names its images (the rearrangement never decodes
them). Returns {ImageId: wnid} for the validation images.
"""

from __future__ import annotations

from pathlib import Path


def wnid(index: int) -> str:
    return f"n{1440764 + index * 7:08d}"


def write_tiny_ilsvrc(root: Path, classes: int = 3, train_per_class: int = 2, val_per_class: int = 2) -> dict[str, str]:
    images = root / "ILSVRC" / "Data" / "CLS-LOC"
    (images / "val").mkdir(parents=True, exist_ok=True)
    (root / "LOC_synset_mapping.txt").write_text("".join(f"{wnid(c)} class {c}, tiny\n" for c in range(classes)))
    labels: dict[str, str] = {}
    for c in range(classes):
        train = images / "train" / wnid(c)
        train.mkdir(parents=True, exist_ok=True)
        for i in range(train_per_class):
            (train / f"{wnid(c)}_{i}.JPEG").write_bytes(f"train {c} {i}".encode() * (c + 1))
        for i in range(val_per_class):
            image_id = f"ILSVRC2012_val_{c * val_per_class + i + 1:08d}"
            (images / "val" / f"{image_id}.JPEG").write_bytes(f"val {c} {i}".encode())
            labels[image_id] = wnid(c)
    rows = "".join(f"{image_id},{label} 10 20 110 120 {label} 5 5 50 50\n" for image_id, label in labels.items())
    (root / "LOC_val_solution.csv").write_text("ImageId,PredictionString\n" + rows)
    return labels
