"""trainer.image_files: what the loader and the GPU decoders read of a file without decoding it.
A file cut short is found from its header and its end; whether a training box is decoded alone on
the GPU follows the frame header's sampling factors, agrees with PIL's reading of them, and a cut
or hostile header is read in bounded time without raising."""

from __future__ import annotations

import io

import numpy as np
import pytest

from test_vision_decode import _encoded, _variants
from trainer.image_files import check_complete, first_scan, header_segments, region_stays_on_gpu


@pytest.mark.parametrize("name, stays", [
    ("baseline 4:2:0", False), ("q96 4:4:4 (ImageNet's usual)", True), ("progressive", False), ("greyscale", True),
    ("CMYK", False), ("EXIF rotated", False), ("PNG", False), ("PNG with alpha", False)])
def test_a_region_stays_on_the_gpu_only_for_a_sequential_jpeg_without_subsampled_chroma(name, stays):
    """The frame header's sampling factors decide: a greyscale or YCbCr JPEG with every component
    alike (4:4:4) keeps a region on the GPU; subsampled chroma, a progressive or CMYK JPEG and
    other formats are decoded whole. Read from bytes and from a numpy array's memoryview (what
    DALI's inputs are)."""
    data = _variants()[name]
    assert region_stays_on_gpu(data) is stays
    assert region_stays_on_gpu(memoryview(np.frombuffer(data, dtype=np.uint8))) is stays


def test_the_sampling_rule_agrees_with_pils_reading_of_the_frame_header():
    """PIL's own reading of each JPEG (JpegImagePlugin.get_sampling: 0 for 4:4:4, 1 for 4:2:2, 2 for
    4:2:0) against the header walk, over qualities and subsamplings, with an EXIF thumbnail of the
    other kind in APP1 (its frame header must not be read as the image's)."""
    from PIL import Image, JpegImagePlugin

    for quality in (50, 90, 96):
        for subsampling in (0, 1, 2):
            data = _encoded(quality=quality, subsampling=subsampling)
            thumbnail = _encoded(quality=50, subsampling=2 if subsampling == 0 else 0)
            payload = b"Exif\x00\x00" + thumbnail
            with_thumbnail = data[:2] + b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload + data[2:]
            for jpeg in (data, with_thumbnail):
                with Image.open(io.BytesIO(jpeg)) as image:
                    pil = JpegImagePlugin.get_sampling(image)
                assert pil == subsampling and region_stays_on_gpu(jpeg) is (pil == 0), (quality, subsampling)


def test_a_hostile_or_cut_header_decodes_whole_and_never_raises():
    """Every prefix of a 4:4:4 JPEG's header, a frame header claiming 255 components in 20 bytes,
    a segment length running past the end, lengths of zero: each is read in bounded time, never
    raises, and gives False (decode it whole) unless the whole frame header is there."""
    data = _variants()["q96 4:4:4 (ImageNet's usual)"]
    scan = first_scan(data)
    frame = data.index(b"\xff\xc0")
    for cut in range(scan + 2):
        assert region_stays_on_gpu(data[:cut]) is (cut >= frame + 2 + 8 + 3 * 3), cut
    claims = data[:frame + 9] + b"\xff" + data[frame + 10:frame + 20]
    assert region_stays_on_gpu(claims) is False
    runs_past = data[:frame] + b"\xff\xe2\xff\xff" + b"\x00" * 16
    assert region_stays_on_gpu(runs_past) is False
    zeros = b"\xff\xd8" + b"\xff\xe0\x00\x00" * 10_000
    assert region_stays_on_gpu(zeros) is False and first_scan(zeros) == -1
    twelve_bit = data[:frame + 4] + b"\x0c" + data[frame + 5:]  # the frame's sample precision
    assert region_stays_on_gpu(twelve_bit) is False and region_stays_on_gpu(data) is True


def test_a_header_of_more_segments_than_a_camera_writes_is_decoded_whole_without_being_walked():
    """Empty APP segments before the frame header: up to MAX_SEGMENTS in all the frame is still
    found; beyond, the walk stops and the file is decoded whole. The loader's cut-short check still
    walks the whole header (such a file is complete)."""
    from trainer.image_files import MAX_SEGMENTS

    data = _variants()["q96 4:4:4 (ImageNet's usual)"]
    own = sum(1 for i, marker in header_segments(data) if i < data.index(b"\xff\xc0"))
    padded = [data[:2] + b"\xff\xe0\x00\x02" * extra + data[2:] for extra in (MAX_SEGMENTS - own - 1, MAX_SEGMENTS)]
    assert [region_stays_on_gpu(f) for f in padded] == [True, False]
    check_complete(padded[1])


@pytest.mark.parametrize("name", list(_variants()))
def test_a_file_cut_short_is_found_from_its_end_and_a_whole_one_passes(name):
    """What the loader checks for a GPU decoder, which decodes nothing itself: a JPEG or PNG cut
    anywhere (a third in, or its last bytes) is an OSError, which Substitutes replaces."""
    data = _variants()[name]
    check_complete(data)
    for cut in (len(data) // 3, len(data) - 2, len(data) - 1):
        with pytest.raises(OSError, match="truncated"):
            check_complete(data[:cut])


def test_a_jpeg_cut_right_after_its_exif_thumbnail_is_found_and_trailing_bytes_are_not_a_cut():
    """A thumbnail in APP1 is a whole JPEG, end-of-image marker and all: a file cut just after it
    still lacks the image's scans. Bytes after the end marker (padding) leave a file complete."""
    main, thumbnail = _variants()["baseline 4:2:0"], _encoded(quality=50)
    payload = b"Exif\x00\x00" + thumbnail
    app1 = b"\xff\xe1" + (len(payload) + 2).to_bytes(2, "big") + payload
    with_thumbnail = main[:2] + app1 + main[2:]
    from PIL import Image

    assert Image.open(io.BytesIO(with_thumbnail)).size == (100, 75)  # a valid JPEG
    check_complete(with_thumbnail)
    check_complete(with_thumbnail + b"\x00" * 1000)
    with pytest.raises(OSError, match="truncated"):
        check_complete(with_thumbnail[:2 + len(app1)])
