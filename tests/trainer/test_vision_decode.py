"""trainer.vision_decode (--decode nvjpeg and nvimgcodec) on CPU, up to the GPU: the refusals, the
crops the loader draws (the CPU path's own), and the crop, resize and flip the GPU applies, run
here on a CPU tensor against the CPU path's result. The nvJPEG decode itself needs a GPU;
nvImageCodec's runs here on its CPU backend (its GPU decode: tests/trainer/test_vision_decode_gpu.py)."""

from __future__ import annotations

import io
import threading
import types

import pytest
import torch

pytest.importorskip("torchvision", reason="torchvision is a pinned dependency")

from config.workloads.vision import ImageDataConfig, SyntheticImagesConfig  # noqa: E402
from trainer import vision_data  # noqa: E402
from trainer.cli import UsageError  # noqa: E402
from trainer import vision_decode  # noqa: E402
from trainer.image_files import check_complete  # noqa: E402
from trainer.encoded_images import NO_CROP, EncodedFiles, EncodedImages  # noqa: E402
from trainer.vision_decode import (CodecImages, DecodeAhead, NvjpegImages, augment, decoded_by_pil,  # noqa: E402
                                   model_inputs, relabelled, stand_ins)
from trainer.vision_input import check_installed, check_nvjpeg, device_input  # noqa: E402


@pytest.mark.parametrize("source, cuda, native, says", [
    ("synthetic", True, True, "--data synthetic has none"),
    ("/data", False, True, "this machine has none"),
    ("/data", True, False, "C++ operators"),
])
def test_nvjpeg_is_refused_in_one_line_where_it_cannot_run(source, cuda, native, says):
    with pytest.raises(UsageError, match="^--decode: nvjpeg") as e:
        check_nvjpeg(source, cuda=cuda, native_torchvision=native)
    assert says in str(e.value) and "--decode cpu" in str(e.value) and "\n" not in str(e.value)
    check_nvjpeg("/data", cuda=True, native_torchvision=True)  # a GPU with torchvision's operators: allowed


def _decoded(path) -> torch.Tensor:
    from PIL import Image
    from torchvision.transforms.functional import pil_to_tensor
    with Image.open(path) as f:
        return pil_to_tensor(f.convert("RGB"))


def test_the_loader_reads_bytes_and_draws_the_cpu_paths_crop_and_the_gpu_side_applies_it(image_folder):
    data = ImageDataConfig(source=str(image_folder), image_size=16, decode="nvjpeg")
    train, val, classes = vision_data.build_datasets(data, SyntheticImagesConfig(), seed=0)
    assert isinstance(train, EncodedImages) and isinstance(val, EncodedImages) and classes == 2
    cpu_train, _ = vision_data.transforms(16)
    for index in (0, 5, 30):
        path, label = train.samples[index]
        torch.manual_seed(index)
        encoded, got_label, crop, got_path = train[index]
        assert bytes(encoded.tolist()) == open(path, "rb").read() and got_label == label and got_path == str(path)
        torch.manual_seed(index)
        expected = cpu_train(_image(path))  # the CPU path under the same seed: the same draws
        out = augment(_decoded(path), list(crop), 16)
        assert out.dtype == torch.uint8 and out.shape == expected.shape == (3, 16, 16)
        # The same box and flip; only the resampling filter differs (tensor vs PIL bilinear).
        assert (out.float() - expected.float()).abs().mean() < 4
        flipped = augment(_decoded(path), [*crop[:4], 1 - crop[4]], 16)
        assert (flipped.float() - expected.float()).abs().mean() > (out.float() - expected.float()).abs().mean()
    encoded, _, crop, _ = val[0]
    assert crop == NO_CROP and augment(_decoded(val.samples[0][0]), list(crop), 16).shape == (3, 16, 16)
    images, labels, crops, names = EncodedImages.collate([train[0], train[1], train[2]])
    assert len(images) == 3 and labels.shape == (3,) and crops.shape == (3, 5)
    assert names == [str(train.samples[i][0]) for i in range(3)]


def test_a_micro_batch_of_files_crosses_from_a_loader_process_as_one_tensor(image_folder):
    """EncodedFiles: one storage (one descriptor, one pinned copy) per micro-batch, not one per file,
    made in the loader process's shared memory; each file still reads back as its own bytes, in
    order, by index, slice and iteration; a tensor that is not bytes is refused."""
    from torch.utils.data import DataLoader

    data = ImageDataConfig(source=str(image_folder), image_size=16, decode="nvjpeg")
    train, _, _ = vision_data.build_datasets(data, SyntheticImagesConfig(), seed=0)
    loader = DataLoader(train, batch_size=5, num_workers=1, collate_fn=_collate_saying_if_shared,
                        multiprocessing_context="fork", timeout=120)
    (files, labels, crops, names), made_shared = next(iter(loader))
    assert made_shared  # in the loader process's shared memory, which pickling then shares as is
    assert isinstance(files, EncodedFiles) and len(files) == 5 == len(names)
    storages = {f.untyped_storage().data_ptr() for f in files}
    assert storages == {files.flat.untyped_storage().data_ptr()}  # views of the one tensor
    for i, (path, label) in enumerate(train.samples[:5]):
        expected = open(path, "rb").read()
        assert bytes(files[i].numpy()) == expected == bytes(list(files)[i].numpy()) and labels[i] == label
    assert bytes(files[-1].numpy()) == open(train.samples[4][0], "rb").read()
    with pytest.raises(IndexError):
        files[5]
    assert [bytes(f.numpy()) for f in files[1:4:2]] == [bytes(files[1].numpy()), bytes(files[3].numpy())]
    empty = EncodedFiles.of([])
    assert len(empty) == 0 and list(empty) == [] and not EncodedFiles.of([torch.zeros(3, dtype=torch.uint8)]).flat.is_shared()
    with pytest.raises(ValueError, match="file 1 is a torch.uint8 tensor of shape \\(2, 2\\), not 1-D uint8"):
        EncodedFiles.of([torch.zeros(3, dtype=torch.uint8), torch.zeros(2, 2, dtype=torch.uint8)])


@pytest.mark.parametrize("train", [True, False])
def test_the_loader_opens_each_file_once_and_draws_the_box_on_the_bytes_it_hands_over(image_folder, monkeypatch,
                                                                                    train):
    """One open per file (each a metadata round trip on FSx for Lustre), not a second for the header;
    so a file replaced between two reads cannot give a box drawn on other bytes than those decoded."""
    import builtins

    data = ImageDataConfig(source=str(image_folder), image_size=16, decode="nvjpeg")
    train_set, val_set, _ = vision_data.build_datasets(data, SyntheticImagesConfig(), seed=0)
    dataset = train_set if train else val_set
    path = dataset.samples[0][0]
    opened = []
    real_open = builtins.open

    def counting_open(file, *args, **kwargs):
        opened.append(str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", counting_open)
    encoded, _, crop, _ = dataset[0]
    monkeypatch.undo()
    assert opened.count(str(path)) == 1, opened
    assert bytes(encoded.numpy()) == open(path, "rb").read() and (crop[2] > 0) == train


def _collate_saying_if_shared(batch):
    """EncodedImages.collate, and whether its bytes were made in shared memory (asked in the loader
    process, before pickling would move them there)."""
    out = EncodedImages.collate(batch)
    return out, out[0].flat.is_shared()


def _image(path):
    from PIL import Image
    with Image.open(path) as f:
        return f.convert("RGB")


# --- --decode nvimgcodec -------------------------------------------------------------------------


@pytest.mark.parametrize("decode, source, installed, says", [
    ("nvimgcodec", "synthetic", True, "--data synthetic has none"),
    ("nvimgcodec", "/data", False, "nvidia-nvimgcodec-cu12"),
    ("dali", "synthetic", True, "--data synthetic has none"),
    ("dali", "/data", False, "nvidia-dali-cuda120"),
])
def test_nvimgcodec_and_dali_are_refused_in_one_line_where_they_cannot_run(decode, source, installed, says):
    with pytest.raises(UsageError, match=f"^--decode: {decode} ") as e:
        check_installed(decode, source, installed=installed)
    assert says in str(e.value) and "--decode cpu" in str(e.value) and "\n" not in str(e.value)
    check_installed(decode, "/data", installed=True)  # allowed, on a CPU too (its CPU backend)


def _encoded(**save) -> bytes:
    """A 75x100 image of noise in the format and mode asked for."""
    import io

    from PIL import Image
    g = torch.Generator().manual_seed(1)
    pixels = torch.randint(0, 256, (75, 100, 3), dtype=torch.uint8, generator=g).numpy()
    fmt, mode = save.pop("format", "JPEG"), save.pop("mode", "RGB")
    out = io.BytesIO()
    Image.fromarray(pixels).convert(mode).save(out, format=fmt, **save)
    return out.getvalue()


def _variants() -> dict[str, bytes]:
    from PIL import Image
    rotated = Image.Exif()
    rotated[0x0112] = 6  # EXIF orientation "rotate 90": PIL (the CPU path) does not apply it, so neither may we
    return {"baseline 4:2:0": _encoded(quality=90), "q96 4:4:4 (ImageNet's usual)": _encoded(quality=96, subsampling=0),
            "progressive": _encoded(quality=90, progressive=True), "greyscale": _encoded(mode="L"),
            "CMYK": _encoded(mode="CMYK"), "EXIF rotated": _encoded(exif=rotated.tobytes()),
            "PNG": _encoded(format="PNG"), "PNG with alpha": _encoded(format="PNG", mode="RGBA")}


@pytest.fixture(scope="module")
def codec():
    return CodecImages(torch.device("cpu"), 32, hw_decoder_load=0.9, threads=1)


@pytest.mark.parametrize("name", list(_variants()))
def test_nvimgcodec_decodes_only_the_box_and_gives_the_pixels_pil_gives(codec, name, monkeypatch):
    """The box is all it decodes (a region of interest), and on this CPU (libjpeg-turbo, as PIL)
    the result is the very pixels of PIL's full decode cropped to the box, then resized and
    flipped alike: equal, not close. On a GPU nvJPEG's IDCT differs in the last levels. Where the
    GPU's backends refuse some regions (CodecImages.region_kinds), the whole image is decoded for
    every box ("none") or for those of JPEGs with subsampled chroma ("per-file"), to the same
    pixels."""
    from trainer.image_files import region_stays_on_gpu

    data = torch.frombuffer(bytearray(_variants()[name]), dtype=torch.uint8)
    full = decoded_by_pil(data)
    assert full.shape == (3, 75, 100)
    for regions in ("all", "none", "per-file"):
        monkeypatch.setattr(codec, "regions", regions)
        for box in ([5, 7, 40, 50, 0], [0, 0, 75, 100, 1], [30, 61, 45, 39, 1], list(NO_CROP)):
            got, (encoded, streams, decoded), order = codec.augmented([data], [box])
            assert order is None  # nothing stood in for
            assert got.shape == (1, 3, 32, 32) and got.dtype == torch.uint8
            assert torch.equal(got[0], augment(full, box, 32)), (name, box, regions)
            # What the caller keeps while a device may still read it: the bytes and the decode.
            assert encoded == [data] and len(streams) == len(decoded) == 1
            alone = regions == "all" or (regions == "per-file" and region_stays_on_gpu(_variants()[name]))
            cropped = box[2] > 0 and alone
            assert tuple(decoded[0].shape) == ((3, box[2], box[3]) if cropped else (3, 75, 100)), (name, box)


class _Codec:
    """nvImageCodec's API as CodecImages.region_kinds uses it, on this CPU: a decoder of the given
    backends decodes a region of a probe JPEG where `decodes` says it does (by backend and by
    4:2:0 or 4:4:4), else nothing, as nvImageCodec returns for a region it refuses."""
    HW_GPU_ONLY, GPU_ONLY, HYBRID_CPU_GPU = "hardware", "cuda", "hybrid"

    def __init__(self, decodes: dict[str, set[str]]):
        self.decodes, self.made = decodes, []
        codec = self

        class Decoder:
            def __init__(self, device_id, backends):
                self.backends = [b.kind for b in backends]
                codec.made.append(tuple(self.backends))

            def decode(self, stream, params):
                kind = "hardware" if self.backends == ["hardware"] else "cuda"
                return object() if stream.kind in codec.decodes[kind] else None

        self.Decoder = Decoder

    def Backend(self, kind, **_):  # noqa: N802 (nvImageCodec's name)
        return types.SimpleNamespace(kind=kind)

    def CodeStream(self, data):  # noqa: N802
        from trainer.image_files import region_stays_on_gpu
        kind = "4:4:4" if region_stays_on_gpu(data) else "4:2:0"
        return types.SimpleNamespace(get_sub_code_stream=lambda region: types.SimpleNamespace(kind=kind))

    def Region(self, *box):  # noqa: N802
        return box


@pytest.mark.parametrize("hardware, decodes, regions", [
    ("", {"cuda": {"4:2:0", "4:4:4"}}, "all"),  # nvJPEG 13.2 and later, hardware decoder unused
    ("crop boxes", {"hardware": {"4:2:0", "4:4:4"}, "cuda": {"4:2:0", "4:4:4"}}, "all"),
    ("whole images", {"hardware": {"4:4:4"}, "cuda": {"4:4:4"}}, "per-file"),  # the CUDA 12 nvJPEG's rule
    ("", {"cuda": {"4:4:4"}}, "per-file"),  # --hw-decoder-load 0, or no hardware decoder
    ("crop boxes", {"hardware": {"4:2:0", "4:4:4"}, "cuda": {"4:4:4"}}, "per-file"),
    ("whole images", {"hardware": set(), "cuda": {"4:2:0", "4:4:4"}}, "none"),
    ("", {"cuda": set()}, "none"),
])
def test_which_boxes_are_decoded_alone_follows_what_every_backend_taking_part_decodes(hardware, decodes, regions):
    """region_kinds asks each backend that takes part (the hardware decoder only where it is used)
    for a region of the 4:2:0 probe, then of the 4:4:4 one: every box alone where all decode the
    first, those of 4:4:4 and greyscale JPEGs where all decode the second, else none. A region
    one refuses would go to PIL on this CPU, a file at a time."""
    codec = CodecImages.__new__(CodecImages)
    codec.n, codec.device, codec.hardware = _Codec({"hardware": set(), **decodes}), torch.device("cuda", 0), hardware
    codec.params = None
    assert codec.region_kinds() == regions
    assert ("hardware",) not in codec.n.made or hardware  # an unused hardware decoder is not asked


def test_a_file_nvimgcodec_does_not_decode_and_pil_does_is_said_once(codec, capsys, monkeypatch):
    """A GIF: nvImageCodec has no decoder for it, PIL decodes it on the CPU. That is said, once a
    run, naming the first such file, so a decode that leaves the GPU is never silent."""
    import io

    from PIL import Image
    monkeypatch.setattr(codec, "said_pil", False)  # the module's decoder: as a run starts
    gif = io.BytesIO()
    Image.open(io.BytesIO(_variants()["PNG"])).convert("P").save(gif, format="GIF")
    files = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in (gif.getvalue(), _variants()["PNG"])]
    for _ in range(2):
        out, _, order = codec.augmented(files, [list(NO_CROP)] * 2, ["train/c/a.gif", "train/c/b.png"])
        assert out.shape == (2, 3, 32, 32) and order is None
    err = capsys.readouterr().err
    assert err.count("note: nvImageCodec did not decode") == 1, err
    assert "note: nvImageCodec did not decode train/c/a.gif; PIL decodes each such file whole on the CPU" in err


def test_a_file_nvimgcodec_cannot_read_is_decoded_by_pil_and_a_non_image_raises_pils_error(codec, monkeypatch):
    png = torch.frombuffer(bytearray(_encoded(format="PNG")), dtype=torch.uint8)
    box = [5, 7, 40, 50, 1]
    refuses = type("Refuses", (), {"decode": lambda self, streams, **kw: [None] * len(streams)})()
    monkeypatch.setattr(codec, "decoder", refuses)
    assert torch.equal(codec.augmented([png], [box])[0][0], augment(decoded_by_pil(png), box, 32))
    from PIL import UnidentifiedImageError
    with pytest.raises(UnidentifiedImageError):
        codec.augmented([torch.frombuffer(bytearray(b"not an image" * 8), dtype=torch.uint8)], [box])



def undecodable_jpeg(data: bytes) -> bytes:
    """`data` (a JPEG) with its first Huffman table's codes overwritten: whole, with a header PIL
    reads and an end marker, so it passes the loader's checks (check_complete, the size for the
    crop), and only decoding finds it bad (PIL: "broken data stream"; nvImageCodec decodes nothing)."""
    table = data.index(b"\xff\xc4")
    return data[:table + 4] + b"\xff" * 26 + data[table + 30:]


def test_a_file_only_the_decoder_finds_bad_is_named_counted_and_stood_in_for(codec, monkeypatch, capsys):
    """A micro-batch of four whose second file passes every check the loader makes and does not
    decode: the next image of the micro-batch takes its place, label and crop too; the file is
    named on stderr and counted against --max-bad-images. A micro-batch of nothing but such files
    stops the run (DecoderStopped); a decoder with nowhere to count raises the decode's error."""
    from PIL import Image
    from trainer.vision_data import DecoderStopped, UnreadableImages

    good = _encoded(quality=90)
    bad = undecodable_jpeg(good)
    check_complete(bad)
    with Image.open(io.BytesIO(bad)) as header:
        assert header.size == (100, 75)
    with pytest.raises(OSError):
        decoded_by_pil(torch.frombuffer(bytearray(bad), dtype=torch.uint8))

    files = [_encoded(quality=q) for q in (70, 80, 90, 95)]
    files[1] = bad
    encoded = [torch.frombuffer(bytearray(f), dtype=torch.uint8) for f in files]
    boxes = torch.tensor([[5, 7, 40, 50, 0], [0, 0, 75, 100, 1], [30, 61, 45, 39, 1], list(NO_CROP)])
    labels, names = torch.tensor([10, 11, 12, 13]), [f"train/c/{i}.jpg" for i in range(4)]
    unreadable = UnreadableImages(limit=5)
    monkeypatch.setattr(codec, "unreadable", unreadable)
    images, got_labels = codec(encoded, labels, boxes, names)
    assert got_labels.tolist() == [10, 12, 12, 13]
    alone, _ = codec([encoded[2]], labels[2:3], boxes[2:3], names[2:3])
    assert torch.equal(images[1], alone[0]) and torch.equal(images[2], alone[0])
    assert unreadable.this_epoch() == 1
    err = capsys.readouterr().err
    assert err.count("warning: cannot read train/c/1.jpg (OSError: ") == 1
    assert "another image of its micro-batch is used in its place (--max-bad-images)" in err

    with pytest.raises(DecoderStopped, match="none of the 2 images"):  # all of the micro-batch: every rank stops
        codec([encoded[1], encoded[1]], labels[:2], boxes[:2], names[:2])
    monkeypatch.setattr(codec, "unreadable", None)
    with pytest.raises(OSError):  # nowhere to count
        codec(encoded, labels, boxes, names)


def test_stand_ins_are_the_next_decoded_image_round_the_micro_batch():
    from trainer.vision_data import UnreadableImages

    error = OSError("broken data stream")
    images = [error, "a", error, error, "b", error]
    assert stand_ins(images, None, UnreadableImages(limit=10)) == [1, 1, 4, 4, 4, 1]
    assert stand_ins(["a", "b"], None, None) is None
    labels = torch.tensor([5, 6, 7])
    assert relabelled(labels, None) is labels and relabelled(labels, [0, 2, 2]).tolist() == [5, 7, 7]


def test_a_micro_batch_none_of_which_decodes_stops_every_rank_in_one_line_naming_the_data():
    """Not a few bad files: the decoder cannot read this data. The first error was raised in the
    decode-ahead thread, so one rank stopped with its traceback while its peers met a broken
    collective; DecoderStopped is what trainer.vision stops every rank on, at an agreed step
    after a save, as for IN_A_ROW unreadable files (tests/trainer/test_vision_faults.py)."""
    from trainer.cli import UsageError
    from trainer.vision_data import DecoderStopped, FolderUnreadable, UnreadableImages

    unreadable = UnreadableImages(limit=10)
    with pytest.raises(DecoderStopped) as stopped:
        stand_ins([OSError("broken data\nstream"), RuntimeError("unsupported")], ["a.jpg", "b.jpg"], unreadable)
    assert isinstance(stopped.value, FolderUnreadable) and unreadable.this_epoch() == 0
    argument, what = stopped.value.problem
    assert argument == "--data" and what.startswith(
        "none of the 2 images of a micro-batch decoded (the first, a.jpg: OSError: broken data stream)"), what
    unreadable.folder_gone("in step 7", step=7, problem=stopped.value.problem)
    with pytest.raises(UsageError) as said:
        unreadable.raise_gone([0], "/fsx/imagenet", "every rank stopped at step 9 with the checkpoint of step 6")
    assert str(said.value) == f"--data: {what}, on rank 0 in step 7; every rank stopped at step 9 with the " \
                              "checkpoint of step 6"
    with pytest.raises(OSError):  # nowhere to count (a benchmark): the decoder's own error
        stand_ins([OSError("broken"), OSError("broken")], None, None)


def test_nvjpeg_decodes_each_file_alone_when_one_fails_the_batch_and_pil_has_the_last_word(monkeypatch, capsys):
    """torchvision's batched decode_jpeg fails the whole batch for one bad file. NvjpegImages then
    decodes each alone, and a file nvJPEG cannot decode goes to PIL, whose error makes it a stand-in.
    No GPU here and no torchvision C++ decoder on this CPU: decode_jpeg is played by PIL, which fails
    as nvJPEG does (a RuntimeError) on the undecodable file."""
    from trainer.vision_data import UnreadableImages

    class Io:
        ImageReadMode = type("Mode", (), {"RGB": "RGB"})
        calls: list[int] = []

        @classmethod
        def decode_jpeg(cls, data, mode, device):
            batch = data if isinstance(data, list) else [data]
            cls.calls.append(len(batch))
            try:
                out = [decoded_by_pil(d) for d in batch]
            except OSError as error:
                raise RuntimeError(f"nvjpeg: {error}") from None
            return out if isinstance(data, list) else out[0]

    monkeypatch.setattr(vision_decode, "import_torchvision", lambda: type("TV", (), {"io": Io}))
    nvjpeg = NvjpegImages(CPU, 16, unreadable=UnreadableImages(limit=5))
    good, bad = _encoded(quality=90), undecodable_jpeg(_encoded(quality=90))
    encoded = [torch.frombuffer(bytearray(f), dtype=torch.uint8) for f in (good, bad, good)]
    images, labels = nvjpeg(encoded, torch.tensor([0, 1, 2]), torch.tensor([list(NO_CROP)] * 3), ["g", "b", "g2"])
    assert Io.calls == [3, 1, 1, 1] and labels.tolist() == [0, 2, 2]
    assert torch.equal(images[0], images[1]) and nvjpeg.unreadable.this_epoch() == 1
    assert "warning: cannot read b (OSError: " in capsys.readouterr().err


def test_nvjpeg_out_of_memory_is_raised_not_mended_by_pil(monkeypatch):
    """torch's OutOfMemoryError is a RuntimeError too: a GPU out of memory is no bad file, and must
    not send every image of every micro-batch to PIL on the CPU unseen."""
    class Io:
        ImageReadMode = type("Mode", (), {"RGB": "RGB"})

        @staticmethod
        def decode_jpeg(data, mode, device):
            raise torch.OutOfMemoryError("CUDA out of memory")

    monkeypatch.setattr(vision_decode, "import_torchvision", lambda: type("TV", (), {"io": Io}))
    nvjpeg = NvjpegImages(CPU, 16, unreadable=vision_data.UnreadableImages(limit=5))
    encoded = [torch.frombuffer(bytearray(_encoded(quality=90)), dtype=torch.uint8)] * 2
    with pytest.raises(torch.OutOfMemoryError):
        nvjpeg(encoded, torch.tensor([0, 1]), torch.tensor([list(NO_CROP)] * 2), ["a", "b"])
    assert nvjpeg.unreadable.this_epoch() == 0

@pytest.mark.parametrize("decode, says", [("nvimgcodec", "nvImageCodec decodes on this CPU"),
                                          ("dali", "DALI decodes (the box alone where the JPEG's chroma is not "
                                                   "subsampled, else the whole image) on this CPU")])
def test_a_micro_batch_through_a_gpu_decoder_is_the_cpu_paths_crop_normalised(image_folder, decode, says):
    """The loader side is EncodedImages, as for nvjpeg: the same box and flip as the CPU path draws
    under the same seed; the whole micro-batch comes out normalised, labels kept, from nvImageCodec's
    CPU backend or DALI's CPU operators."""
    data = ImageDataConfig(source=str(image_folder), image_size=16, decode=decode)
    train, val, _ = vision_data.build_datasets(data, SyntheticImagesConfig(), seed=0)
    assert isinstance(train, EncodedImages) and isinstance(val, EncodedImages)
    to_input = device_input(data, torch.device("cpu"))
    assert to_input.describe().startswith(says) and to_input.decodes
    cpu_train, _ = vision_data.transforms(16)
    items = []
    expected = []
    for index in (0, 5, 30):
        torch.manual_seed(index)
        items.append(train[index])
        torch.manual_seed(index)
        expected.append(cpu_train(_image(train.samples[index][0])))
    images, labels = to_input(*EncodedImages.collate(items))
    assert images.shape == (3, 3, 16, 16) and images.dtype == torch.float32
    assert labels.tolist() == [train.samples[i][1] for i in (0, 5, 30)]
    cpu = vision_data.DeviceImages(torch.device("cpu"))(torch.stack(expected), labels)[0]
    assert (images - cpu).abs().mean() < 4 / 255 / 0.229  # as the nvjpeg test: only the resampling filter differs


# --- inputs made ahead in a thread (DecodeAhead) ---------------------------------------------------

CPU = torch.device("cpu")


class Counted:
    """Loader micro-batches (bytes stand-ins, labels, crops) that count how many were taken."""

    def __init__(self, n: int):
        self.n, self.taken = n, 0

    def __iter__(self):
        for i in range(self.n):
            self.taken += 1
            yield [torch.full((4,), i, dtype=torch.uint8)], torch.tensor([i]), torch.tensor([list(NO_CROP)])


def _as_input(encoded, labels, crops):
    return encoded[0].float() * 2, labels


def test_inputs_made_ahead_are_the_loaders_in_its_order_then_the_end_every_time():
    ahead = DecodeAhead(iter(Counted(7)), _as_input, CPU)
    got = [(images.tolist(), labels.item()) for images, labels in ahead]
    assert got == [([2.0 * i] * 4, i) for i in range(7)]
    for _ in range(2):
        with pytest.raises(StopIteration):
            next(ahead)
    ahead.close()
    assert not ahead.thread.is_alive()


def test_a_failure_in_the_thread_is_raised_by_next_after_the_inputs_made_before_it():
    def fails_at_3(encoded, labels, crops):
        if labels.item() == 3:
            raise OSError("image file is truncated")
        return _as_input(encoded, labels, crops)

    ahead = DecodeAhead(iter(Counted(7)), fails_at_3, CPU)
    assert [next(ahead)[1].item() for _ in range(3)] == [0, 1, 2]
    with pytest.raises(OSError, match="truncated"):
        next(ahead)
    ahead.close()
    assert not ahead.thread.is_alive()


def test_closed_early_the_thread_ends_and_reads_the_loader_no_further():
    """A step loop that stops (preemption) closes its inputs: the thread, blocked on a full queue,
    ends, and the loader has been read at most the queue's depth and the one in hand ahead."""
    loader = Counted(1000)
    ahead = DecodeAhead(iter(loader), _as_input, CPU, depth=2)
    next(ahead), next(ahead)
    ahead.close()
    assert not ahead.thread.is_alive()
    taken = loader.taken
    assert 2 <= taken <= 2 + 2 + 1
    assert loader.taken == taken  # nothing read after close()


def test_a_thread_gone_without_a_word_is_an_error_not_the_end_of_the_epoch(monkeypatch):
    monkeypatch.setattr(DecodeAhead, "_put", lambda self, item: True)  # drops every input
    ahead = DecodeAhead(iter(Counted(3)), _as_input, CPU)
    ahead.thread.join(30)
    with pytest.raises(RuntimeError, match="ended without a result or an error"):
        next(ahead)


def _hung_decoder():
    """A DecodeAhead whose thread is stuck in a decode until the returned event is set."""
    release = threading.Event()

    def hangs(encoded, labels, crops):
        release.wait(60)
        return _as_input(encoded, labels, crops)

    return DecodeAhead(iter(Counted(3)), hangs, CPU), release


def test_a_hung_decode_thread_does_not_replace_the_step_loops_own_error(capsys):
    """The loop failed (a dead peer, say) while the thread was stuck: the run's crash names the
    loop's error, and the thread that did not stop is one warning line."""
    ahead, release = _hung_decoder()
    try:
        with pytest.raises(ConnectionError, match="peer 3 is gone"):
            try:
                raise ConnectionError("peer 3 is gone")
            finally:
                ahead.close(timeout=0.2)
        assert "WARNING: the decode-ahead thread did not stop within 0.2 s; the step loop's own error follows" in \
            capsys.readouterr().err
    finally:
        release.set()
        ahead.thread.join(30)
    assert not ahead.thread.is_alive()


def test_a_hung_decode_thread_after_a_loop_that_ended_well_is_an_error():
    ahead, release = _hung_decoder()
    try:
        with pytest.raises(RuntimeError, match="did not stop within 0.2 s"):
            ahead.close(timeout=0.2)
    finally:
        release.set()
        ahead.thread.join(30)


@pytest.mark.parametrize("decode", ["nvimgcodec", "dali"])
def test_gpu_decoders_make_their_inputs_ahead_and_the_cpu_path_in_turn(image_folder, decode):
    data = ImageDataConfig(source=str(image_folder), image_size=16, decode=decode)
    ahead = model_inputs(iter(Counted(2)), device_input(data, CPU), CPU)
    assert isinstance(ahead, DecodeAhead)
    ahead.close()
    cpu = ImageDataConfig(source=str(image_folder), image_size=16, decode="cpu")
    assert not isinstance(model_inputs(iter(Counted(2)), device_input(cpu, CPU), CPU), DecodeAhead)
    in_turn = model_inputs(iter(Counted(2)), _as_input, CPU)
    assert not isinstance(in_turn, DecodeAhead) and next(in_turn)[1].item() == 0
    in_turn.close()


def _bomb(data: bytes, width: int, height: int) -> bytes:
    """`data` (a baseline JPEG) whose frame header claims width x height: a decompression bomb, a few
    KB that a decoder would expand to width x height x 3 bytes."""
    frame = data.index(b"\xff\xc0")
    return (data[:frame + 5] + height.to_bytes(2, "big") + width.to_bytes(2, "big") + data[frame + 9:])


@pytest.mark.parametrize("train", [True, False])
def test_a_decompression_bomb_is_refused_by_the_loader_in_training_and_in_evaluation(tmp_path, train):
    """A JPEG whose header claims 20,000 x 20,000 pixels (1.2 GB decoded) in a few KB: the loader
    refuses it as PIL does on the CPU path (DecompressionBombError, an unreadable image that the
    next one replaces), for evaluation too, where it draws no box. A GPU decoder would otherwise
    try to decode the whole image at every evaluation, run out of memory and restart there."""
    from PIL import Image

    path = tmp_path / "bomb.jpg"
    path.write_bytes(_bomb(_encoded(quality=90), 20_000, 20_000))
    check_complete(path.read_bytes())  # whole: the loader's cut-short check passes it
    dataset = EncodedImages([(str(path), 0)], ["a"], train=train)
    with pytest.raises(Image.DecompressionBombError):
        dataset[0]
    assert Image.DecompressionBombError in vision_data.unreadable_errors()
