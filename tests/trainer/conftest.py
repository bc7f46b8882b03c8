"""Fixtures the trainer's test modules share."""

from __future__ import annotations

import pytest
import torch


def write_image_folder(root, *, train: int = 24, val: int = 8):
    """An ImageFolder root at `root`: train/ and val/ with two classes ("cat", "dog") of `train`
    and `val` 30x40 PNG images each, the same pixels every time."""
    from PIL import Image
    g = torch.Generator().manual_seed(0)
    for split, count in (("train", train), ("val", val)):
        for label, name in enumerate(("cat", "dog")):
            folder = root / split / name
            folder.mkdir(parents=True)
            for i in range(count):
                base = torch.full((30, 40, 3), 60 + 130 * label, dtype=torch.float32)
                pixels = (base + 30 * torch.randn(30, 40, 3, generator=g)).clamp(0, 255).to(torch.uint8)
                Image.fromarray(pixels.numpy()).save(folder / f"{i}.png")
    return root


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    """A small ImageFolder root: train/ and val/ with two classes of 30x40 PNG images."""
    return write_image_folder(tmp_path_factory.mktemp("imagefolder"))


@pytest.fixture
def make_image_folder():
    """write_image_folder, for a test that needs other counts."""
    return write_image_folder


@pytest.fixture
def sigterm_once_renamed_onto(monkeypatch):
    """Call with a path: from then on, os.replace onto it sends this process SIGTERM just after the
    rename. signal.raise_signal runs a Python handler at once, so it runs right there."""
    import os
    import signal

    rename = os.replace

    def arm(target):
        def replace_then_sigterm(src, dst):
            rename(src, dst)
            if dst == target:
                signal.raise_signal(signal.SIGTERM)

        monkeypatch.setattr(os, "replace", replace_then_sigterm)

    return arm
