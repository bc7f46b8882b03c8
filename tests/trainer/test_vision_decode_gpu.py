"""The GPU decoders on a GPU. --decode nvimgcodec: it decodes there (the probe would refuse a
decoder that cannot), says whether the hardware JPEG decoder took part, gives pixels close to the
CPU path's, makes no synchronisation torch can see, and never makes the host wait for the training
stream. --decode nvjpeg: it never writes into memory the training stream still reads. Either: a
micro-batch with a file the GPU cannot decode still comes out; the loader pins a micro-batch of
files in one copy. Needs a GPU;
skipped elsewhere (the CPU backend's tests are in test_vision_decode.py)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="nvImageCodec's GPU decode: needs a GPU")

from cuda_syncs import synchronising_calls  # noqa: E402
from test_vision_decode import _variants  # noqa: E402

from trainer.torchvision_compat import import_torchvision, prepare  # noqa: E402
from trainer.encoded_images import NO_CROP  # noqa: E402
from trainer.vision_decode import CodecImages, DecodeAhead, NvjpegImages, augment, decoded_by_pil  # noqa: E402

BOXES = ([5, 7, 40, 50, 0], [0, 0, 75, 100, 1], list(NO_CROP))


@pytest.fixture(scope="module")
def codec():
    return CodecImages(torch.device("cuda", torch.cuda.current_device()), 32, hw_decoder_load=0.9, threads=2)


def test_it_decodes_on_the_gpu_and_says_which_decoder(codec):
    line = codec.describe()
    assert "on the GPU" in line, line
    print(line)  # the hardware decoder's presence, for the session's log
    cuda_only = CodecImages(codec.device, 32, hw_decoder_load=0.0, threads=2)
    assert cuda_only.hardware == "" and "with CUDA" in cuda_only.describe()


def _without_pil(codec, load: float, monkeypatch, kind: str):
    """The codec at `load` (printed with what its probes found), with PIL made to fail the test
    for any file: what nvImageCodec decodes then is decoded on the GPU."""
    import trainer.vision_decode as vision_decode

    to_input = codec if load else CodecImages(codec.device, 32, hw_decoder_load=load, threads=2)
    print(f"load {load}: hardware {to_input.hardware!r}, regions {to_input.regions}")

    def by_pil_or_error(*args):
        raise AssertionError(f"PIL decoded a {kind} box: {args}")

    monkeypatch.setattr(vision_decode, "by_pil_or_error", by_pil_or_error)
    return to_input


@pytest.mark.parametrize("load", [0.9, 0.0])
def test_a_4_2_0_training_box_is_decoded_on_the_gpu_not_by_pil(codec, load, monkeypatch):
    """With or without the hardware decoder, a box of a 4:2:0 JPEG comes from nvImageCodec on the
    GPU: where a GPU backend refuses such a region (nvJPEG under 13.2), it decodes whole images.
    Before, at load 0 each box went to PIL on the CPU, one file at a time, unsaid."""
    to_input = _without_pil(codec, load, monkeypatch, "4:2:0")
    data = torch.frombuffer(bytearray(_variants()["baseline 4:2:0"]), dtype=torch.uint8)
    out, _, order = to_input.augmented([data] * 2, [list(BOXES[0]), list(BOXES[1])])
    torch.cuda.synchronize()
    assert order is None and out.shape == (2, 3, 32, 32) and out.device.type == "cuda"


@pytest.mark.parametrize("load", [0.9, 0.0])
def test_a_4_4_4_training_box_is_decoded_alone_on_the_gpu_where_the_probes_say_so(codec, load, monkeypatch):
    """Where every backend taking part decodes a region of the 4:4:4 probe (regions "per-file" or
    "all"), a 4:4:4 JPEG's box is all nvImageCodec decodes, on the GPU (PIL is not called); where
    not ("none"), the whole image. With the CUDA 12 nvJPEG the source says "per-file"."""
    to_input = _without_pil(codec, load, monkeypatch, "4:4:4")
    data = torch.frombuffer(bytearray(_variants()["q96 4:4:4 (ImageNet's usual)"]), dtype=torch.uint8)
    box = list(BOXES[0])
    out, (_, _, decoded), order = to_input.augmented([data], [box])
    torch.cuda.synchronize()
    assert order is None and out.shape == (1, 3, 32, 32) and out.device.type == "cuda"
    alone = to_input.regions in ("all", "per-file")
    assert tuple(decoded[0].shape) == ((3, box[2], box[3]) if alone else (3, 75, 100))


@pytest.mark.parametrize("name", list(_variants()))
def test_its_pixels_are_the_cpu_paths_up_to_the_idct(codec, name):
    """nvJPEG's IDCT (and the hardware decoder's) differ from libjpeg-turbo's in the last levels:
    close, not equal (the CPU backend's test asks for equality)."""
    data = torch.frombuffer(bytearray(_variants()[name]), dtype=torch.uint8)
    full = decoded_by_pil(data)
    for box in BOXES:
        got = codec.augmented([data], [box])[0]
        assert got.device.type == "cuda" and got.shape == (1, 3, 32, 32)
        expected = augment(full, box, 32)
        assert (got[0].cpu().float() - expected.float()).abs().mean() < 3, (name, box)


def test_a_micro_batch_makes_no_synchronisation_torch_can_see(codec):
    data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in _variants().values()]
    crops = torch.tensor([BOXES[i % 2] for i in range(len(data))], dtype=torch.int64)
    labels = torch.arange(len(data))
    codec(data, labels, crops)  # warm-up: allocations and the decoder's first-use set-up
    torch.cuda.synchronize()
    out = []
    assert synchronising_calls(lambda: out.extend(codec(data, labels, crops))) == []
    images, out_labels = out
    assert images.shape == (len(data), 3, 32, 32) and images.dtype == torch.float32 and out_labels.is_cuda


# About half a second of a GPU's clock (1.4 to 2 GHz): far longer than decoding a few small images.
BUSY_CYCLES = 1_000_000_000


# A decode's host call may still wait for the training stream now and then, inside nvImageCodec: on
# an H100 (2026-11-27, bench/RESULTS.md) a fresh decoder waited in 3 to 5 of 16 rounds, nearly always
# the first two, and then at random (rounds 5, 7, 8, 9, 12, 14). A likely cause, in its source: its
# Python API hands nvJPEG no allocator, so nvJPEG grows its buffers with cudaMalloc and cudaFree
# (NVIDIA/nvImageCodec extensions/nvjpeg/cuda_decoder.cpp sets the padding options to 0 without
# one), and cudaFree waits for the whole device. The bug this test holds waited in every round.
ROUNDS = 16


def test_a_decode_seldom_waits_for_the_training_stream(codec):
    """The training stream is busy (a step queued); decoding the next micro-batch returns while it
    still is, in most rounds. Before, the side stream waited for the training stream and
    nvImageCodec's next call waited on the host for its previous decode: the host waited out every
    step."""
    # Pinned, as the trainer's loader hands them over (pin_memory on a GPU): a copy from pageable
    # memory may wait for its stream (CUDA's API synchronisation notes), the training stream here.
    data = [torch.frombuffer(bytearray(b), dtype=torch.uint8).pin_memory() for b in _variants().values()]
    crops = torch.tensor([BOXES[i % 2] for i in range(len(data))], dtype=torch.int64).pin_memory()
    labels = torch.arange(len(data)).pin_memory()
    codec(data, labels, crops)
    waited = []
    for round_ in range(ROUNDS):
        torch.cuda.synchronize()
        torch.cuda._sleep(BUSY_CYCLES // 8)  # a step's worth, ten times a decode of these files
        busy = torch.cuda.Event()
        busy.record()
        images, _ = codec(data, labels, crops)
        if busy.query():
            waited.append(round_)
    torch.cuda.synchronize()
    print(f"decode waited for the training stream in rounds {waited} of {ROUNDS}")
    assert len(waited) <= ROUNDS // 2, f"the host waited for the training stream while decoding, rounds {waited}"
    assert torch.isfinite(images).all()


def test_inputs_made_ahead_in_a_thread_are_read_only_once_made(codec):
    """DecodeAhead's hand-over on a GPU: the thread's stream is held up before each decode, so an
    input read without waiting for its event would be read before it is written. Each one equals
    the input made in turn (up to the hardware decoder's IDCT, should it take other images)."""
    data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in _variants().values()]
    batches = [(data, torch.arange(len(data)) + k, torch.tensor([BOXES[(i + k) % 3] for i in range(len(data))]))
               for k in range(4)]
    in_turn = [codec(*batch) for batch in batches]

    def held_up(*batch):
        torch.cuda._sleep(BUSY_CYCLES // 10)
        return codec(*batch)

    ahead = DecodeAhead(iter(batches), held_up, codec.device)
    try:
        made = list(ahead)
    finally:
        ahead.close()
    assert len(made) == len(in_turn)
    for (images, labels), (expected, expected_labels) in zip(made, in_turn):
        assert torch.equal(labels, expected_labels)
        assert (images - expected).abs().mean().item() < 3 / 255 / 0.229


def _baseline_jpeg() -> bytes:
    """A 256x256 baseline 4:2:0 JPEG: what nvJPEG's hardware decoder takes, where there is one."""
    import io

    from PIL import Image
    g = torch.Generator().manual_seed(2)
    out = io.BytesIO()
    Image.fromarray(torch.randint(0, 256, (256, 256, 3), dtype=torch.uint8, generator=g).numpy()).save(
        out, format="JPEG", quality=90)
    return out.getvalue()


def _overwritten(decode, rounds: int = 20) -> int:
    """Rounds in which `decode` wrote into memory the current stream still read: a tensor of ones
    the size of the decoded image is summed after a busy kernel, freed before the sum has run (the
    allocator may hand its block straight back on this stream), and then the JPEG is decoded."""
    data = torch.frombuffer(bytearray(_baseline_jpeg()), dtype=torch.uint8)
    wrong = 0
    for _ in range(rounds):
        ones = torch.ones(3 * 256 * 256, dtype=torch.uint8, device="cuda")
        torch.cuda._sleep(BUSY_CYCLES // 20)
        total = ones.sum(dtype=torch.int64)
        del ones
        decoded = decode([data])
        wrong += int(total.item() != 3 * 256 * 256)
        assert decoded[0].shape == (3, 256, 256)
    return wrong


@pytest.mark.skipif(not prepare(), reason="torchvision without its C++ operators: no --decode nvjpeg")
def test_nvjpeg_never_writes_into_memory_the_training_stream_still_reads():
    """torchvision's decode_jpeg alone (what NvjpegImages called before) is the control: on an H100
    it overwrote such memory (pytorch/vision#9606; the trainer's loss went NaN)."""
    device = torch.device("cuda", torch.cuda.current_device())
    tv = import_torchvision().io
    bare = _overwritten(lambda encoded: tv.decode_jpeg(encoded, mode=tv.ImageReadMode.RGB, device=device))
    ours = _overwritten(NvjpegImages(device, 32).decode)
    print(f"rounds with memory overwritten, of 20: torchvision's decode_jpeg {bare}, NvjpegImages {ours}")
    assert ours == 0


@pytest.mark.parametrize("decoder", ["nvimgcodec", "nvjpeg"])
def test_a_micro_batch_with_a_file_the_gpu_cannot_decode_still_comes_out(codec, decoder):
    """A JPEG with a broken Huffman table passes the loader's checks. On the GPU either decoder
    may refuse it (then PIL refuses it too, and the next image of the micro-batch stands in, counted
    once) or decode something from it (nvJPEG may not notice): the micro-batch comes out either way,
    never an exception, and a stand-in carries its own label."""
    from test_vision_decode import _encoded, undecodable_jpeg
    from trainer.vision_data import UnreadableImages

    if decoder == "nvjpeg" and not prepare():
        pytest.skip("torchvision without its C++ operators: no --decode nvjpeg")
    unreadable = UnreadableImages(limit=5)
    if decoder == "nvimgcodec":
        to_input = CodecImages(codec.device, 32, hw_decoder_load=0.9, threads=2, unreadable=unreadable)
    else:
        to_input = NvjpegImages(codec.device, 32, unreadable=unreadable)
    files = [_encoded(quality=q) for q in (70, 80, 90)]
    files[1] = undecodable_jpeg(files[1])
    encoded = [torch.frombuffer(bytearray(f), dtype=torch.uint8).pin_memory() for f in files]
    labels = torch.tensor([0, 1, 2])
    images, got = to_input(encoded, labels, torch.tensor([list(NO_CROP)] * 3), ["a", "bad", "c"])
    torch.cuda.synchronize()
    assert images.shape == (3, 3, 32, 32) and bool(torch.isfinite(images).all())
    print(f"{decoder}: a broken Huffman table was {'stood in for' if unreadable.this_epoch() else 'decoded'}")
    assert got.tolist() == ([0, 2, 2] if unreadable.this_epoch() == 1 else [0, 1, 2])
    assert unreadable.this_epoch() in (0, 1)


def test_labels_reordered_for_a_stand_in_stay_pinned():
    """Pinned, their copy to the GPU stays asynchronous (from pageable memory it may wait)."""
    from trainer.vision_decode import relabelled

    pinned = torch.tensor([0, 1, 2]).pin_memory()
    out = relabelled(pinned, [0, 2, 2])
    assert out.is_pinned() and out.tolist() == [0, 2, 2]


def test_a_micro_batch_of_files_is_pinned_once_and_its_files_still_read_back():
    """The DataLoader's pin thread pins an EncodedFiles in one copy: every file a view of it, pinned,
    with its own bytes (nvJPEG's copy to the device is then asynchronous)."""
    from torch.utils.data._utils.pin_memory import pin_memory

    from trainer.encoded_images import EncodedFiles

    files = [torch.full((n,), n % 251, dtype=torch.uint8) for n in (3, 1000, 7)]
    pinned = pin_memory((EncodedFiles.of(files), torch.tensor([0, 1, 2])))[0]
    assert isinstance(pinned, EncodedFiles) and pinned.flat.is_pinned()
    assert [f.is_pinned() for f in pinned] == [True] * 3
    assert [f.tolist() for f in pinned] == [f.tolist() for f in files]
