"""The ImageNet presets against their sources: the learning-rate scaling and the rest of the recipe
against torchvision's classification references, and the data loaders sized from the node.

Source: pytorch/vision, references/classification/README.md
(https://github.com/pytorch/vision/blob/main/references/classification/README.md): "all models
have been trained on 8x V100 GPUs with the following parameters: --batch_size 32, --epochs 90,
--lr 0.1, --momentum 0.9, --wd 1e-4, --lr-step-size 30, --lr-gamma 0.1"; "### ResNet: torchrun
--nproc_per_node=8 train.py --model $MODEL"; "If you use a different number of GPUs and/or a
different batch size, then the learning rate should be scaled accordingly" (its ResNext section).
So: 0.1 per 8 x 32 = 256 images, scaled linearly with the global batch. The README's later recipes
(EfficientNet-V2, ConvNeXt, ViT-L/16, ShuffleNet V2) use --label-smoothing 0.1, --lr-warmup-epochs 5
with a linear warm-up, cosineannealinglr and --norm-weight-decay 0.0. For EfficientNet-B0..B7 the
README trains nothing: "The weights of the B5-B7 variants are ported from Luke Melas'
EfficientNet-PyTorch repo"; there is no torchvision recipe for B7 to follow.
"""

from __future__ import annotations

import pytest

from config.instance_types import INSTANCE_TYPES
from config.kubernetes import NODE_CPU_SHARE
from config.presets import PRESETS, SIZED_FOR, loader_workers
from config.workloads.vision import SgdConfig, VisionJobConfig

# field: (ours, the reference's, why ours differs where it does)
RECIPE = {
    "lr per 256 images": (0.1, 0.1, "README defaults: --lr 0.1 at 8 GPUs x --batch_size 32"),
    "momentum": (0.9, 0.9, ""),
    "weight decay": (1e-4, 1e-4, "README defaults --wd 1e-4; none on norms and biases as --norm-weight-decay 0.0"),
    "epochs": (90, 90, ""),
    "label smoothing": (0.1, 0.1, "the README's later recipes (--label-smoothing 0.1); its ResNet-50 V1 run had none"),
    "warm-up epochs": (5, 5, "the later recipes' --lr-warmup-epochs 5; a global batch of 3,072 needs one "
                            "(the V1 recipe at 256 images has none)"),
    "schedule": ("cosine", "cosineannealinglr", "the later recipes'; V1 used steps (30, x0.1)"),
}
DEVIATIONS = {
    "efficientnetb7-imagenet": "torchvision ports B7's weights and has no recipe for it; we train it with the ResNet "
                               "recipe above and SyncBatchNorm, because 8 images per GPU at 600x600 are too few for "
                               "BatchNorm's statistics (the README's MaxViT recipe passes --sync-bn)",
}


def _job(preset: str) -> VisionJobConfig:
    job = PRESETS[preset].workload.trainer_config
    assert isinstance(job, VisionJobConfig)
    return job


@pytest.mark.parametrize("preset", ["resnet50-imagenet", "efficientnetb7-imagenet"])
def test_the_imagenet_presets_follow_the_reference_recipe_and_scale_the_rate_with_the_global_batch(preset):
    job = _job(preset)
    ours = {"lr per 256 images": job.optimizer.lr, "momentum": job.optimizer.momentum,
            "weight decay": job.optimizer.weight_decay, "epochs": job.epochs,
            "label smoothing": job.optimizer.label_smoothing, "warm-up epochs": job.optimizer.warmup_epochs,
            "schedule": "cosine"}
    assert ours == {k: v[0] for k, v in RECIPE.items()}
    assert all(v[0] == v[1] or v[1] == "cosineannealinglr" for v in RECIPE.values())
    from trainer.optim import image_learning_rate  # the peak is lr x global / 256: 1.2 at 3,072 images
    epoch = 1_281_167
    peak = image_learning_rate(job.optimizer, job.epochs, job.batch.global_batch_size, 5 * epoch, epoch)
    assert peak == pytest.approx(0.1 * job.batch.global_batch_size / 256, rel=1e-6)
    assert job.efficiency.sync_batchnorm == (preset in DEVIATIONS)
    assert SgdConfig().lr == 0.1 and SgdConfig().label_smoothing == 0.1  # the trainer's own defaults agree


@pytest.mark.parametrize("instance, workers", [("p4d.24xlarge", 8), ("p5.48xlarge", 18)])
def test_loader_workers_per_gpu_come_from_the_nodes_vcpus_per_gpu_less_the_ranks_own(instance, workers):
    # p4d: 96 vCPUs, 8 A100; p5: 192 vCPUs, 8 H100. The pod requests 85% of them (k8s/pods/resources.py):
    # 81 // 8 = 10 and 163 // 8 = 20 per GPU, 2 of which the rank's own process keeps.
    it = INSTANCE_TYPES[instance]
    assert it.loader_workers_per_gpu(NODE_CPU_SHARE) == workers
    assert workers * it.gpus + 2 * it.gpus <= it.vcpus * NODE_CPU_SHARE  # the pod's request holds them all
    assert loader_workers({v: k for k, v in SIZED_FOR.items()}[instance]) == workers
    for preset in ("resnet50-imagenet", "efficientnetb7-imagenet"):  # both run on p4d
        assert _job(preset).data.workers == loader_workers(PRESETS[preset].nodegroup)
