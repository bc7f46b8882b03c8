"""--decode nvimgcodec on a GPU: it decodes there (the probe would refuse a decoder that cannot),
says whether the hardware JPEG decoder took part, gives pixels close to the CPU path's, and makes
no synchronisation torch can see. Needs a GPU; skipped elsewhere (the CPU backend's tests are in
test_vision_decode.py)."""

from __future__ import annotations

import warnings

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="nvImageCodec's GPU decode: needs a GPU")

from test_vision_decode import _variants  # noqa: E402

from trainer.vision_decode import NO_CROP, CodecImages, augment, decoded_by_pil  # noqa: E402

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
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            images, out_labels = codec(data, labels, crops)
        finally:
            torch.cuda.set_sync_debug_mode("default")
    syncs = [str(w.message) for w in caught if "synchroniz" in str(w.message)]
    assert syncs == []
    assert images.shape == (len(data), 3, 32, 32) and images.dtype == torch.float32 and out_labels.is_cuda
