"""What is read of an image file without decoding it: a JPEG's header, walked segment by segment;
whether a JPEG or PNG was cut short; whether a region of a JPEG is decoded on the GPU or would go
to the CPU; and the small JPEGs the GPU decoders decode before training. The loader processes
check every file here (trainer.encoded_images.EncodedImages), and the GPU decoders choose per file
here whether to decode the training box alone or the whole image (trainer/vision_decode.py,
trainer/vision_dali.py). Only NumPy and PIL (for the test JPEGs): nothing here touches a GPU.
"""

from __future__ import annotations

import io

import numpy as np

JPEG_MAGIC = b"\xff\xd8\xff"
PNG_END = b"IEND\xaeB`\x82"  # the IEND chunk's type and CRC: a PNG's last 8 bytes
# How far before a JPEG's end its end-of-image marker may lie: encoders pad, some cameras append.
JPEG_TAIL = 8192


def header_segments(data):
    """(offset, marker) of each marker segment of a JPEG's header, up to and including its first
    start-of-scan; an EXIF thumbnail's markers sit inside its APP1 segment and are skipped. Ends
    early where the header is not one (bytes that are not a marker). `data`: bytes, or anything
    that indexes to ints (a numpy array's memoryview)."""
    i = 2
    while i + 4 <= len(data):
        if data[i] != 0xFF:
            return
        marker = data[i + 1]
        if marker == 0xFF:  # a fill byte
            i += 1
            continue
        yield i, marker
        if marker == 0xDA:
            return
        if marker == 0x01 or 0xD0 <= marker <= 0xD9:  # markers without a length
            i += 2
        else:
            i += 2 + ((data[i + 2] << 8) | data[i + 3])


def first_scan(data: bytes) -> int:
    """Where a JPEG's first start-of-scan marker lies; -1 if there is none."""
    return next((i for i, marker in header_segments(data) if marker == 0xDA), -1)


# The most header segments region_stays_on_gpu reads before the frame header, in the training process
# for every file: a camera's JPEG has a dozen (APP0, EXIF, ICC profile parts, tables); a header of
# thousands of empty segments (a hostile file) is decoded whole rather than walked.
MAX_SEGMENTS = 256
# Start-of-frame markers of sequential Huffman JPEGs: baseline (SOF0) and extended (SOF1), what the
# GPUs' hardware JPEG decoders take.
SEQUENTIAL_FRAMES = (0xC0, 0xC1)


def region_stays_on_gpu(data) -> bool:
    """Whether a region of this file (a training box decoded alone) is decoded on the GPU: a
    sequential 8-bit JPEG, greyscale or YCbCr, whose components share one sampling factor (4:4:4),
    so that there is no chroma to upsample. nvImageCodec 0.9.0 with the CUDA 12 nvJPEG refuses a
    region of a JPEG with subsampled chroma (4:2:0, 4:2:2), which then goes to the CPU
    (trainer/vision_dali.py's docstring has the source). False for those, for progressive, 12-bit
    and CMYK JPEGs (rare; this rule does not say where nvJPEG takes them), other formats and a
    header that does not read: such a file is decoded whole, which is never refused for being a
    region. Reads only the header's segments, at most MAX_SEGMENTS of them: a few microseconds a
    file."""
    if bytes(data[:3]) != JPEG_MAGIC:
        return False
    for n, (i, marker) in enumerate(header_segments(data)):
        if n == MAX_SEGMENTS:
            return False
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # a frame (C4, C8, CC are not)
            # Frame header: length (2), precision (1), height (2), width (2), components (1), then
            # 3 bytes a component: id, sampling factors (high nibble horizontal, low vertical), table.
            count = data[i + 9] if i + 9 < len(data) else 0
            if count not in (1, 3) or i + 10 + 3 * count > len(data):  # CMYK, or the header cut short
                return False
            factors = {data[i + 11 + 3 * k] for k in range(count)}
            return marker in SEQUENTIAL_FRAMES and data[i + 4] == 8 and len(factors) == 1
    return False


def check_complete(data: bytes) -> None:
    """OSError where a JPEG or PNG file is cut short (an interrupted copy or download): the loader
    reads only bytes and headers for a GPU decoder, so this is where such a file can still be
    named and replaced (vision_data.Substitutes) instead of failing a batch in the training process.
    A JPEG's end-of-image marker follows its scans within JPEG_TAIL of the file's end; entropy-coded
    data never holds one (0xFF is always stuffed there). It reads the header and the tail, never the
    whole file: this runs in the loader for every image."""
    if data[:3] == JPEG_MAGIC:
        scan = first_scan(data)
        if scan < 0 or data.rfind(b"\xff\xd9", max(scan, len(data) - JPEG_TAIL)) < 0:
            raise OSError("JPEG file is truncated (no end-of-image marker after its scans)")
    elif data[:8] == b"\x89PNG\r\n\x1a\n" and PNG_END not in data[-64:]:
        raise OSError("PNG file is truncated (no IEND chunk)")


def probe_jpeg(subsampling: int = 2) -> bytes:
    """A 64x48 baseline JPEG, made here: 4:2:0 (PIL's subsampling 2), what CodecImages.probe
    decodes; 4:4:4 with `subsampling` 0."""
    from PIL import Image

    pixels = (np.arange(64 * 48 * 3, dtype=np.uint32).reshape(48, 64, 3) * 37 % 251).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format="JPEG", quality=90, subsampling=subsampling)
    return out.getvalue()
