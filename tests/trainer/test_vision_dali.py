"""trainer.vision_dali (--decode dali) on this CPU: DALI runs the same graph here as on a GPU, with its
CPU operators in place of the mixed decoder and the GPU resize. Checked against the CPU path
(PIL, torchvision): the pixels of a whole decode and of a training crop, a larger micro-batch
after a smaller one, and a file DALI cannot decode. Its refusals and a loader's micro-batch
through device_input: test_vision_decode.py. The GPU graph: test_vision_dali_gpu.py."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch

pytest.importorskip("torchvision", reason="torchvision is a pinned dependency")
pytest.importorskip("nvidia.dali", reason="nvidia-dali-cuda120 is a pinned dependency")

from trainer.vision_dali import DaliImages  # noqa: E402
from trainer.vision_data import DecoderStopped  # noqa: E402
from trainer.encoded_images import NO_CROP  # noqa: E402
from trainer.vision_decode import augment, decoded_by_pil  # noqa: E402

from test_vision_decode import _variants, undecodable_jpeg  # noqa: E402

CPU = torch.device("cpu")
BOXES = [[5, 7, 40, 50, 0], [0, 0, 75, 100, 1], [30, 61, 45, 39, 1], [10, 20, 8, 9, 0]]


@pytest.fixture(scope="module", params=["per-file", "none", "all"])
def dali(request):
    """The three training graphs: the box decoded alone or the whole image decoded and cropped,
    chosen per file (the trainer's), and each of them for every file (a benchmark's)."""
    return DaliImages(CPU, 32, hw_decoder_load=0.9, threads=1, regions=request.param)


def _smooth(**save) -> bytes:
    """A 75x100 image of gradients and waves (no noise: resampling filters agree on it)."""
    from PIL import Image
    y, x = np.mgrid[0:75, 0:100]
    pixels = np.stack([x * 2.5, y * 3.3, 128 + 60 * np.sin(x / 7) * np.cos(y / 5)], -1).clip(0, 255)
    fmt, mode = save.pop("format", "JPEG"), save.pop("mode", "RGB")
    out = io.BytesIO()
    Image.fromarray(pixels.astype(np.uint8)).convert(mode).save(out, format=fmt, **save)
    return out.getvalue()


def _bytes(data: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def _raw(dali: DaliImages, encoded: list[torch.Tensor], crops: list[list[int]]) -> torch.Tensor:
    """The uint8 micro-batch DALI makes, before normalising: DeviceImages' input."""
    seen = {}
    normalise = dali.images
    dali.images = lambda images, labels: seen.setdefault("images", images)
    try:
        dali(encoded, torch.arange(len(encoded)), torch.tensor(crops))
    finally:
        dali.images = normalise
    return seen["images"]


@pytest.mark.parametrize("name", list(_variants()))
def test_evaluation_decodes_each_whole_image_to_pils_very_pixels(dali, name):
    """Evaluation's graph only decodes: on this CPU the pixels equal PIL's full decode (EXIF
    orientation not applied, CMYK and greyscale to RGB, a PNG's alpha dropped), and the resize
    and centre crop are the other GPU decoders' (vision_decode.crops_of): equal, not close."""
    data = _bytes(_variants()[name])
    full = decoded_by_pil(data)
    got = _raw(dali, [data, data], [list(NO_CROP)] * 2)
    assert got.shape == (2, 3, 32, 32) and got.dtype == torch.uint8
    expected = augment(full, list(NO_CROP), 32)
    assert torch.equal(got[0], expected) and torch.equal(got[1], expected), name


@pytest.mark.parametrize("name, save", [
    ("baseline 4:2:0", dict(quality=90)), ("q96 4:4:4", dict(quality=96, subsampling=0)),
    ("progressive", dict(quality=90, progressive=True)), ("greyscale", dict(mode="L")),
    ("CMYK", dict(mode="CMYK")), ("PNG with alpha", dict(format="PNG", mode="RGBA")),
])
def test_a_training_box_is_decoded_resized_and_flipped_as_torchvision_does_it(dali, name, save):
    """Each box (enlarged, shrunk, whole image, a corner), and its flip, on the same decode: within
    a level of torchvision on average and 2 at most (DALI's resize filter is its own). The box is
    what it decodes: the flipped box is tens of levels away, as is a box moved a few pixels."""
    data = _bytes(_smooth(**save))
    full = decoded_by_pil(data)
    got = _raw(dali, [data] * len(BOXES), BOXES)
    assert got.shape == (len(BOXES), 3, 32, 32) and got.dtype == torch.uint8
    for out, box in zip(got, BOXES):
        difference = (out.int() - augment(full, box, 32).int()).abs()
        assert difference.float().mean() < 1 and difference.max() <= 2, (name, box)
        flipped = (out.int() - augment(full, [*box[:4], 1 - box[4]], 32).int()).abs()
        moved = (out.int() - augment(full, [box[0] + 4, box[1] + 4, *box[2:]], 32).int()).abs()
        assert flipped.float().mean() > 5 and moved.float().mean() > 1.5, (name, box)


def test_on_noise_the_resize_filters_differ_but_never_by_much_on_average(dali):
    """Pixel noise is where two resampling filters differ most: still under half a level on
    average against torchvision (a few levels at single pixels)."""
    data = _bytes(_variants()["q96 4:4:4 (ImageNet's usual)"])
    full = decoded_by_pil(data)
    got = _raw(dali, [data] * len(BOXES), BOXES)
    for out, box in zip(got, BOXES):
        assert (out.float() - augment(full, box, 32).float()).abs().mean() < 0.6, box


def test_a_larger_micro_batch_builds_a_larger_pipeline_and_a_smaller_one_uses_it(dali):
    """A micro-batch may be short (an epoch's last) or, after the preset changed, longer than any
    before: DALI's pipeline takes up to the size it was built for, and is built again for more."""
    data = _bytes(_smooth(quality=90))
    full = decoded_by_pil(data)
    for n in (2, 5, 1, 5):
        boxes = [BOXES[i % len(BOXES)] for i in range(n)]
        got = _raw(dali, [data] * n, boxes)
        assert got.shape[0] == n
        for out, box in zip(got, boxes):
            assert (out.float() - augment(full, box, 32).float()).abs().mean() < 1
    assert dali.pipes[True].max_batch_size == 5


def test_a_file_dali_cannot_decode_is_decoded_again_by_nvimgcodec_which_stands_in_for_it(capsys):
    """One file of four passes the loader's checks and does not decode (a broken Huffman table):
    DALI's run fails for the whole micro-batch, names the file in one line, and nvImageCodec decodes
    the micro-batch again, standing in the next image for the bad one and counting it. DALI's
    pipeline is built anew, and the next micro-batch is DALI's again. A micro-batch of nothing but
    such files stops the run (DecoderStopped); a bad file where nothing counts them (a benchmark) raises."""
    from trainer.vision_data import UnreadableImages

    unreadable = UnreadableImages(limit=5)
    dali = DaliImages(CPU, 16, hw_decoder_load=0.9, threads=1, unreadable=unreadable)
    files = [_bytes(_smooth(quality=q)) for q in (70, 80, 90, 95)]
    bad = _bytes(undecodable_jpeg(_smooth(quality=90)))
    crops = torch.tensor([[0, 0, 75, 100, 0]] * 4)
    images, labels = dali([files[0], bad, files[2], files[3]], torch.tensor([10, 11, 12, 13]), crops,
                          ["a.jpg", "b.jpg", "c.jpg", "d.jpg"])
    assert labels.tolist() == [10, 12, 12, 13] and torch.equal(images[1], images[2])
    assert unreadable.this_epoch() == 1
    err = capsys.readouterr().err
    assert err.count("warning: DALI could not decode b.jpg (no reason given); nvImageCodec decodes its "
                     "micro-batch instead") == 1, err
    assert err.count("warning: cannot read b.jpg (") == 1 and "another image of its micro-batch" in err, err
    assert True not in dali.pipes  # rebuilt when next needed
    images, labels = dali(files, torch.tensor([0, 1, 2, 3]), crops, list("abcd"))
    assert labels.tolist() == [0, 1, 2, 3] and dali.pipes[True].max_batch_size == 4
    assert "warning" not in capsys.readouterr().err and unreadable.this_epoch() == 1
    with pytest.raises(DecoderStopped, match="none of the 2 images of a micro-batch decoded"):
        dali([bad, bad], torch.tensor([0, 1]), crops[:2], ["x.jpg", "y.jpg"])
    uncounted = DaliImages(CPU, 16, hw_decoder_load=0.9, threads=1)
    with pytest.raises(RuntimeError, match="Failed to decode sample #1"):
        uncounted([files[0], bad], torch.tensor([0, 1]), crops[:2], ["a.jpg", "b.jpg"])


@pytest.mark.parametrize("regions, operator", [("none", "fn.slice"), ("all", "decoders.image_slice"),
                                               ("per-file", "fn.slice")])
def test_an_error_that_is_not_a_bad_file_is_raised_not_decoded_again(capsys, regions, operator):
    """DALI names its operator in every error it raises, a decoder's too. Only its "Failed to
    decode sample" is a bad file: a box outside its image (this code's bug, as a wrong input would
    be) is raised, not hidden by nvImageCodec decoding the micro-batch instead, and nothing is
    counted."""
    from trainer.vision_data import UnreadableImages

    unreadable = UnreadableImages(limit=5)
    dali = DaliImages(CPU, 16, hw_decoder_load=0.9, threads=1, unreadable=unreadable, regions=regions)
    data = _bytes(_smooth(quality=90))  # 100 x 75
    with pytest.raises(RuntimeError, match=operator) as raised:
        dali([data, data], torch.tensor([0, 1]), torch.tensor([BOXES[0], [60, 0, 40, 50, 0]]), ["a.jpg", "b.jpg"])
    assert "Failed to decode sample" not in str(raised.value)
    assert "warning" not in capsys.readouterr().err and unreadable.this_epoch() == 0


@pytest.mark.parametrize("bad_kind, operator", [(0, "decoders.image_slice"), (2, "decoders.image")])
def test_the_per_file_graph_sends_each_file_its_way_and_names_the_bad_one_right(capsys, bad_kind, operator):
    """A micro-batch of 4:2:0 and 4:4:4 files in turn, its third file bad (4:4:4, then 4:2:0): the
    error comes from the branch its kind goes to (the box alone for 4:4:4, the whole image for
    4:2:0), which numbers the file by its place in that branch, #1; the warning names the third
    file, not the micro-batch's #1, and nvImageCodec stands in for it."""
    from trainer.vision_data import UnreadableImages

    kinds = [2, 0, bad_kind, 2 - bad_kind]
    files = [_bytes(_smooth(quality=90, subsampling=kind)) for kind in kinds]
    files[2] = _bytes(undecodable_jpeg(_smooth(quality=90, subsampling=bad_kind)))
    crops = torch.tensor([[0, 0, 75, 100, 0]] * 4)
    assert DaliImages.whole([f.numpy() for f in files]).tolist() == [kind == 2 for kind in kinds]
    uncounted = DaliImages(CPU, 16, hw_decoder_load=0.9, threads=1)
    with pytest.raises(RuntimeError, match=f"(?s)`nvidia.dali.fn.{operator}`.*Failed to decode sample #1"):
        uncounted(files, torch.arange(4), crops, list("abcd"))
    unreadable = UnreadableImages(limit=5)
    dali = DaliImages(CPU, 16, hw_decoder_load=0.9, threads=1, unreadable=unreadable)
    images, labels = dali(files, torch.tensor([10, 11, 12, 13]), crops, ["a.jpg", "b.jpg", "c.jpg", "d.jpg"])
    assert labels.tolist() == [10, 11, 13, 13] and unreadable.this_epoch() == 1
    err = capsys.readouterr().err
    assert "warning: DALI could not decode c.jpg (" in err and "b.jpg" not in err, err


def test_where_the_per_file_graph_does_not_run_one_line_says_so_and_images_are_decoded_whole(monkeypatch, capsys):
    """The graph with DALI's conditional execution runs on test JPEGs as the decoder is made: where
    it fails (here as a DALI without conditionals would), one line names the reason and training
    micro-batches go through the graph without conditionals, every image whole."""
    from trainer import vision_dali

    graph = vision_dali.training_graph

    def no_conditionals(dali, decoder, size, regions):
        if regions == "per-file":
            raise TypeError("conditional execution is not supported here")
        return graph(dali, decoder, size, regions)

    monkeypatch.setattr(vision_dali, "training_graph", no_conditionals)
    dali = DaliImages(CPU, 16, hw_decoder_load=0.9, threads=1)
    assert capsys.readouterr().err == ("note: DALI's per-file training graph did not run here (TypeError: conditional "
                                       "execution is not supported here); each training image is decoded whole\n")
    assert dali.regions == "none" and "the whole image" in dali.describe()
    data = _bytes(_smooth(quality=96, subsampling=0))
    assert _raw(dali, [data] * 2, BOXES[:2]).shape == (2, 3, 16, 16)
    monkeypatch.setattr(vision_dali, "training_graph", graph)
    runs = DaliImages(CPU, 16, hw_decoder_load=0.9, threads=1)
    assert runs.regions == "per-file" and capsys.readouterr().err == "" and True not in runs.pipes


def test_the_check_covers_a_micro_batch_whose_files_all_go_one_way(monkeypatch, capsys):
    """A micro-batch of one kind leaves the other branch empty: the check runs such micro-batches
    too, and a graph that fails only on them is found before training, not at the first such
    micro-batch of an epoch."""
    import numpy as np

    run_graph = DaliImages.run_graph

    def fails_with_an_empty_branch(self, train, encoded, boxes):
        flags = DaliImages.whole([np.frombuffer(data, dtype=np.uint8) for data in encoded])
        if train and self.regions == "per-file" and len(set(flags.tolist())) == 1:
            raise RuntimeError("Error in MIXED operator `nvidia.dali.fn.decoders.image_slice`\nencountered:\n\n"
                               "empty batch\nCurrent pipeline object is no longer valid.")
        return run_graph(self, train, encoded, boxes)

    monkeypatch.setattr(DaliImages, "run_graph", fails_with_an_empty_branch)
    dali = DaliImages(CPU, 16, hw_decoder_load=0.9, threads=1)
    assert dali.regions == "none" and "(empty batch)" in capsys.readouterr().err


def test_a_dali_error_is_told_in_the_operators_own_words():
    from trainer.vision_dali import what_dali_said

    said = RuntimeError("Error in MIXED operator `nvidia.dali.fn.decoders.image_slice`\nencountered:\n\n"
                        "Conditionals are not supported\nCurrent pipeline object is no longer valid.")
    assert what_dali_said(said) == "Conditionals are not supported"
    assert what_dali_said(TypeError("one line\nand more")) == "one line"
    autograph = TypeError('in user code:\n\n    File "graph.py", line 7, in graph  *\n        raise TypeError("x")\n\n'
                          '    TypeError: not here\n')
    assert what_dali_said(autograph) == "TypeError: not here"
    assert what_dali_said(ValueError()) == "ValueError"


class _Refuses:
    """A DALI pipeline whose decoder fails on every micro-batch, its files good or not (4:2:0: the
    whole-image decoder's words)."""
    max_batch_size = 64

    def run(self, *args, **kwargs):
        raise RuntimeError("Error in CPU operator `nvidia.dali.fn.decoders.image`\nencountered:\n\n"
                           "Failed to decode sample #0 : unsupported\nCurrent pipeline object is no longer valid.")


def test_dali_failing_on_good_files_stops_the_run_after_a_few_micro_batches_in_a_row(monkeypatch, capsys):
    """Where nvImageCodec decodes what DALI failed on without a bad file, DALI is failing on good
    files: nvImageCodec decodes those micro-batches, a DALI success in between starts the count
    again, and the third such micro-batch in a row stops the run in one line naming --decode and
    DALI's reason (DecoderStopped: every rank stops at an agreed step, the line naming --decode, exit 2)."""
    from trainer.vision_data import UnreadableImages
    from trainer.vision_dali import RETRIES

    unreadable = UnreadableImages(limit=5)
    dali = DaliImages(CPU, 16, hw_decoder_load=0.9, threads=1, unreadable=unreadable)
    works = dali.build
    files = [_bytes(_smooth(quality=q)) for q in (70, 80)]
    batch = (files, torch.tensor([0, 1]), torch.tensor([BOXES[0]] * 2), ["a.jpg", "b.jpg"])
    monkeypatch.setattr(dali, "build", lambda train, size: _Refuses())
    for _ in range(RETRIES - 1):
        images, labels = dali(*batch)  # nvImageCodec's
        assert labels.tolist() == [0, 1] and images.shape == (2, 3, 16, 16)
    monkeypatch.setattr(dali, "build", works)
    dali(*batch)  # DALI's own: the count starts again
    monkeypatch.setattr(dali, "build", lambda train, size: _Refuses())
    dali.pipes.clear()  # the working pipeline goes, as after a failure
    for _ in range(RETRIES - 1):
        dali(*batch)
    with pytest.raises(DecoderStopped) as stopped:  # every rank stops at an agreed step (trainer.vision)
        dali(*batch)
    assert stopped.value.problem == (
        "--decode", f"dali failed on {RETRIES} micro-batches in a row that nvImageCodec decoded without a bad file "
                    "(the last: a.jpg: unsupported); use --decode nvimgcodec")
    assert unreadable.this_epoch() == 0
    assert capsys.readouterr().err.count("warning: DALI could not decode a.jpg (unsupported)") == 2 * RETRIES - 1


def test_a_bad_file_the_loader_counts_meanwhile_does_not_reset_dalis_count(monkeypatch):
    """The epoch's count of bad files is shared with the loader processes, which add to it at any
    moment: only nvImageCodec standing in for a file of the micro-batch DALI failed on is DALI's
    excuse. Here a loader counts one while every fallback decodes cleanly: the run still stops."""
    from trainer.vision_data import UnreadableImages
    from trainer.vision_dali import RETRIES

    unreadable = UnreadableImages(limit=50)
    dali = DaliImages(CPU, 16, hw_decoder_load=0.9, threads=1, unreadable=unreadable)
    codec = dali.fallback

    def loader_counts_meanwhile(*args):
        unreadable.met("elsewhere.jpg", OSError("truncated"), "the next image")  # a loader process's
        out = codec(*args)
        loader_counts_meanwhile.stood_in = codec.stood_in  # nvImageCodec's own finding, passed on
        return out

    monkeypatch.setattr(dali, "fallback", loader_counts_meanwhile)
    monkeypatch.setattr(dali, "build", lambda train, size: _Refuses())
    files = [_bytes(_smooth(quality=q)) for q in (70, 80)]
    for _ in range(RETRIES - 1):
        dali(files, torch.tensor([0, 1]), torch.tensor([BOXES[0]] * 2), ["a.jpg", "b.jpg"])
    with pytest.raises(DecoderStopped, match="^--decode: dali failed on"):
        dali(files, torch.tensor([0, 1]), torch.tensor([BOXES[0]] * 2), ["a.jpg", "b.jpg"])
    assert unreadable.this_epoch() == RETRIES
