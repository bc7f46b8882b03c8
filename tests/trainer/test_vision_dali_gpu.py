"""--decode dali on a GPU: DALI's mixed decoder (the hardware JPEG decoder and CUDA) and its GPU
resize. Its pixels are close to torchvision's CPU path, its outputs are copied before DALI reuses
their memory even when the stream that copies them is held up, a micro-batch makes no
synchronisation torch can see, and a file DALI cannot decode still lets the micro-batch out. Needs
a GPU; skipped elsewhere (the CPU graph's tests are in test_vision_dali.py)."""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="DALI's GPU decode: needs a GPU")
pytest.importorskip("nvidia.dali", reason="nvidia-dali-cuda120 is a pinned dependency")

from cuda_syncs import synchronising_calls  # noqa: E402
from test_vision_decode import _encoded, _variants, undecodable_jpeg  # noqa: E402
from test_vision_dali import _raw  # noqa: E402
from test_vision_decode_gpu import BUSY_CYCLES  # noqa: E402

from trainer.vision_dali import DaliImages  # noqa: E402
from trainer.encoded_images import NO_CROP  # noqa: E402
from trainer.vision_decode import augment, decoded_by_pil  # noqa: E402

BOXES = ([5, 7, 40, 50, 0], [0, 0, 75, 100, 1], [30, 61, 45, 39, 1])


@pytest.fixture(scope="module")
def dali():
    return DaliImages(torch.device("cuda", torch.cuda.current_device()), 32, hw_decoder_load=0.9, threads=2)


@pytest.mark.parametrize("name", list(_variants()))
def test_its_pixels_are_the_cpu_paths_up_to_the_idct_and_the_filter(dali, name):
    data = torch.frombuffer(bytearray(_variants()[name]), dtype=torch.uint8)
    full = decoded_by_pil(data)
    print(dali.describe())
    for crops in ([list(b) for b in BOXES], [list(NO_CROP)] * 2):
        got = _raw(dali, [data] * len(crops), crops)
        assert got.device.type == "cuda" and got.shape == (len(crops), 3, 32, 32) and got.dtype == torch.uint8
        for out, box in zip(got.cpu(), crops):
            assert (out.float() - augment(full, box, 32).float()).abs().mean() < 3, (name, box)


def test_an_output_is_copied_before_dali_reuses_its_memory(dali):
    """The stream DALI's outputs are copied on is held up (a step queued) while three more
    micro-batches of other images are decoded: each copy still holds its own micro-batch."""
    files = [torch.frombuffer(bytearray(_encoded(quality=q)), dtype=torch.uint8) for q in (60, 75, 90, 97)]
    crops = [list(BOXES[i % 3]) for i in range(4)]
    expected = [_raw(dali, [f] * 4, crops).clone() for f in files]
    torch.cuda.synchronize()
    torch.cuda._sleep(BUSY_CYCLES)
    held = [_raw(dali, [f] * 4, crops) for f in files]
    torch.cuda.synchronize()
    for got, want in zip(held, expected):
        assert torch.equal(got, want)


def test_a_micro_batch_makes_no_synchronisation_torch_can_see(dali):
    data = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in _variants().values()]
    crops = torch.tensor([list(BOXES[i % 3]) for i in range(len(data))])
    labels = torch.arange(len(data))
    dali(data, labels, crops)  # warm-up: the pipeline is built
    torch.cuda.synchronize()
    out = []
    assert synchronising_calls(lambda: out.extend(dali(data, labels, crops))) == []
    images, _ = out
    assert images.shape == (len(data), 3, 32, 32) and images.dtype == torch.float32


def test_a_micro_batch_with_a_file_dali_cannot_decode_still_comes_out(dali):
    """DALI may refuse a broken Huffman table (then nvImageCodec decodes the micro-batch again and
    the next image stands in, counted once) or decode something from it: either way the
    micro-batch comes out, and a stand-in carries its own label."""
    from trainer.vision_data import UnreadableImages

    unreadable = UnreadableImages(limit=5)
    to_input = DaliImages(dali.device, 32, hw_decoder_load=0.9, threads=2, unreadable=unreadable)
    files = [_encoded(quality=q) for q in (70, 80, 90)]
    files[1] = undecodable_jpeg(files[1])
    encoded = [torch.frombuffer(bytearray(f), dtype=torch.uint8).pin_memory() for f in files]
    images, got = to_input(encoded, torch.tensor([0, 1, 2]), torch.tensor([list(BOXES[0])] * 3), ["a", "bad", "c"])
    torch.cuda.synchronize()
    assert images.shape == (3, 3, 32, 32) and bool(torch.isfinite(images).all())
    print(f"dali: a broken Huffman table was {'stood in for' if unreadable.this_epoch() else 'decoded'}")
    assert got.tolist() == ([0, 2, 2] if unreadable.this_epoch() == 1 else [0, 1, 2])


# What nvImageCodec 0.9.0's nvJPEG decoders log as they refuse a region of a chroma-subsampled JPEG
# with fancy upsampling with nvJPEG older than 13.2 (extensions/nvjpeg/hw_decoder.cpp, cuda_decoder.cpp at
# commit b8eeb98); the next backend is the CPU's libjpeg-turbo.
REFUSED_REGION = "ROI decode with fancy upsampling"


def test_a_subsampled_jpegs_box_is_decoded_on_the_gpu_not_handed_to_the_cpu(dali, capfd):
    """The trainer's graph decodes a 4:2:0 image whole on the GPU and crops it: nvImageCodec says
    nothing of a refused region. The control, the box decoded alone (--dali-regions all), prints
    whether this GPU's nvJPEG refused it, as the source says it does below nvJPEG 13.2."""
    data = [torch.frombuffer(bytearray(_encoded(quality=q)), dtype=torch.uint8) for q in (70, 80, 90)]
    crops = [list(b) for b in BOXES]
    got = _raw(dali, data, crops)
    torch.cuda.synchronize()
    assert got.shape == (3, 3, 32, 32)
    assert REFUSED_REGION not in capfd.readouterr().err
    regions = DaliImages(dali.device, 32, hw_decoder_load=0.9, threads=2, regions="all")
    _raw(regions, data, crops)
    torch.cuda.synchronize()
    refused = REFUSED_REGION in capfd.readouterr().err
    if not dali.fallback.cuda_decodes_regions():  # the rule holds here: the control must show it
        assert refused, "nvImageCodec refused no region: its warnings are not printed, so the check above says nothing"
    with capfd.disabled():
        said = "nvImageCodec refused the regions (the CPU decoded them)" if refused else "no refusal printed"
        print(f"dali --dali-regions all on 4:2:0 boxes: {said}")


def test_the_per_file_graph_runs_on_this_gpu_and_decodes_a_mixed_micro_batch_there(dali, capfd):
    """DALI's conditional with the mixed decoder in both branches ran on this GPU as the decoder was
    made (else it fell back, saying so, and regions is "none"). A micro-batch of 4:2:0, 4:4:4 and
    greyscale files in turn comes out within 3 levels of PIL's pixels, each box where it belongs,
    and nvImageCodec refuses no region: the 4:4:4 and greyscale boxes were decoded alone on the GPU."""
    assert dali.regions == "per-file", "the per-file graph did not run on this GPU: its note above says why"
    files = [_encoded(quality=90), _encoded(quality=96, subsampling=0), _encoded(mode="L")] * 2
    data = [torch.frombuffer(bytearray(f), dtype=torch.uint8) for f in files]
    assert DaliImages.whole([d.numpy() for d in data]).tolist() == [True, False, False] * 2
    crops = [list(BOXES[i % 3]) for i in range(len(data))]
    got = _raw(dali, data, crops)
    torch.cuda.synchronize()
    assert REFUSED_REGION not in capfd.readouterr().err
    for out, d, box in zip(got.cpu(), data, crops):
        assert (out.float() - augment(decoded_by_pil(d), box, 32).float()).abs().mean() < 3, box
