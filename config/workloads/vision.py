"""trainer.vision's job configuration: image classification (torchvision's ResNet and
EfficientNet) under elastic DDP, on synthetic images or an ImageFolder."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from config.options import (fraction, fraction_below_one, non_negative_float, non_negative_int, option,
                            positive_float, positive_int, section, switch)
from config.workloads.common import (CheckpointConfig, DistConfig, GlobalBatchConfig, MetricsConfig,
                                     checkpoints_and_metrics_in, max_nonfinite_steps, seed)
from config.workloads.workload import Workload

CLASSIFIERS = ("resnet18", "resnet50", "efficientnet_b7")
# Where JPEGs are decoded: by PIL in the loader processes, or on the GPU (trainer/vision_decode.py): by
# nvJPEG's CUDA decoder through torchvision, or by nvImageCodec, which gives most images to the GPU's
# hardware JPEG decoder where it has one (A100, H100) and the rest to CUDA, or by NVIDIA DALI, which also
# crops, resizes and flips the micro-batch in its own threads (trainer/vision_dali.py).
DECODERS = ("cpu", "nvjpeg", "nvimgcodec", "dali")
# Which training boxes DALI decodes alone (a region of interest) rather than decoding the whole image
# and cropping it: chosen per file from the JPEG's chroma subsampling (trainer/vision_dali.py), or all
# of them one way.
DALI_REGIONS = ("per-file", "all", "none")
GPU_DECODERS = ("nvjpeg", "nvimgcodec", "dali")  # the loader processes read bytes and draw crops; the GPU decodes


@dataclass(frozen=True)
class ClassifierConfig:
    """The model: a torchvision classifier, with random weights or a state_dict file's."""
    name: str = option("resnet18", "torchvision model", flag="--model", choices=CLASSIFIERS)
    init_from: str | None = option(None, "start from this state_dict file (no download)", metavar="FILE")


@dataclass(frozen=True)
class ImageBatchConfig(GlobalBatchConfig):
    """The batch: a micro-batch of images per rank, and the global batch each step trains on."""
    unit: ClassVar[str] = "images"


@dataclass(frozen=True)
class ImageDataConfig:
    """The images: synthetic, or an ImageFolder root with train/ and val/."""
    source: str = option("synthetic", "'synthetic' or a folder with train/ and val/ (ImageFolder)", flag="--data")
    image_size: int = option(224, "training crop, in pixels", parse=positive_int)
    workers: int = option(4, "data-loader processes per rank", parse=non_negative_int)
    decode: str = option("cpu", "where JPEGs are decoded: cpu (PIL in the loader processes, uint8 out), nvjpeg "
                                "(CUDA, on the GPU, in batches; a GPU only), nvimgcodec (the GPU's hardware JPEG "
                                "decoder where it has one, CUDA for the rest, on a side stream) or dali (NVIDIA "
                                "DALI: the same decoders, and the crop, resize and flip in its own threads); an "
                                "ImageFolder only",
                         choices=DECODERS)
    # Most of a batch to the hardware decoder, the rest to CUDA in parallel. DALI's experimental
    # nvImageCodec decoder offered 0.9 by default (nvidia.dali.fn.experimental.decoders.image, DALI 1.x);
    # in DALI 2.4.0 fn.decoders.image and image_slice default to 0.65, and --decode dali passes this
    # value. The H100 runs in bench/RESULTS.md compared 0.9 with 0 (nvimgcodec), no other share.
    hw_decoder_load: float = option(0.9, "--decode nvimgcodec and dali: share of each batch offered to the "
                                         "hardware JPEG decoder, the rest decoded with CUDA", parse=fraction)
    dali_regions: str = option("per-file", "--decode dali: which training boxes are decoded alone rather than "
                                           "cropped from the whole image: per-file (those of JPEGs without "
                                           "subsampled chroma, whose regions nvJPEG decodes on the GPU), all or none",
                               choices=DALI_REGIONS)
    # One bad file in a million must not end a 90-epoch run (a restart meets it again at the same
    # step); a volume that cannot be read must not be trained around either.
    max_bad_images: int = option(100, "images of one epoch on one rank that may be unreadable (truncated, corrupt, "
                                      "not an image): each is logged and the next image used in its place; one "
                                      "more stops the run", parse=non_negative_int)


@dataclass(frozen=True)
class SgdConfig:
    """SGD with momentum, the rate scaled by the global batch, warm-up then cosine decay."""
    lr: float = option(0.1, "learning rate per 256 images of global batch", parse=positive_float)
    warmup_epochs: float = option(1.0, "epochs of linear warm-up", parse=non_negative_float)
    momentum: float = option(0.9, "SGD momentum", parse=non_negative_float)
    weight_decay: float = option(1e-4, "weight decay (none on norms and biases)", parse=non_negative_float)
    label_smoothing: float = option(0.1, "label smoothing of the cross-entropy", parse=fraction_below_one)
    max_nonfinite_steps: int = max_nonfinite_steps("loss")


@dataclass(frozen=True)
class VisionEfficiencyConfig:
    """How a step is computed on the GPU; none changes the recipe."""
    compile: bool = switch("torch.compile the model (the first steps compile; restarts recompile without a cache)")
    # BatchNorm over the micro-batch alone is noisy at EfficientNet-B7's 8 images per GPU.
    sync_batchnorm: bool = switch("BatchNorm statistics over all ranks' micro-batches (SyncBatchNorm; GPU only)")


@dataclass(frozen=True)
class SyntheticImagesConfig:
    """Synthetic data only: an ImageFolder has as many classes as folders, and its own images."""
    classes: int = option(10, "synthetic data: number of classes", parse=positive_int)
    train_samples: int = option(5000, "synthetic data: training images", parse=positive_int)
    val_samples: int = option(1000, "synthetic data: validation images", parse=positive_int)


@dataclass(frozen=True)
class VisionJobConfig:
    """Image classification under DDP (ResNet, EfficientNet from torchvision), elastic and resumable."""
    module: ClassVar[str] = "trainer.vision"
    model: ClassifierConfig = section(ClassifierConfig())
    epochs: int = option(90, "total epochs, counting resumed ones", parse=positive_int)
    batch: ImageBatchConfig = section(ImageBatchConfig(batch_size=32))
    data: ImageDataConfig = section(ImageDataConfig())
    optimizer: SgdConfig = section(SgdConfig())
    efficiency: VisionEfficiencyConfig = section(VisionEfficiencyConfig())
    synthetic: SyntheticImagesConfig = section(SyntheticImagesConfig())
    # One save in flight at a time keeps memory bounded; the end-of-epoch save waits for it.
    checkpoint: CheckpointConfig = section(CheckpointConfig(every=500))
    metrics: MetricsConfig = section(MetricsConfig())
    seed: int = seed()
    dist: DistConfig = section(DistConfig())

    job_outputs = staticmethod(checkpoints_and_metrics_in)


class VisionWorkload(Workload):
    """A preset's arguments of `python -m trainer.vision`."""
    config = VisionJobConfig
