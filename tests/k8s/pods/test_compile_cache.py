"""GPU pods keep torch.compile's caches on FSx, one folder per preset and image, so a restarted
pod loads the kernels its predecessor compiled (k8s/pods/pytorchjob.py compile_cache_env)."""

from __future__ import annotations

import os

import pytest

from config.kubernetes import FSX_MOUNT_PATH
from config.presets import CLUSTER_COMPILE_CACHE_ROOT
from preset_pods import IMAGE, rendered

CACHES = ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


def cache_dirs(environments, image=IMAGE) -> dict[tuple[str, str], tuple[str, str]]:
    """(environment, preset) -> its GPU pods' two cache folders."""
    return {(env.name, preset.name): tuple(env_vars[name] for name in CACHES)
            for env, preset, _, env_vars in rendered(environments, image=image)
            if env.nodegroup(preset.nodegroup).instance_type.is_gpu}


def test_every_gpu_pod_keeps_both_compile_caches_on_the_fsx_mount_and_cpu_pods_none(environments):
    gpu = cache_dirs(environments)
    assert any("llama3-8b" in preset for _, preset in gpu)
    for _, preset, _, env_vars in rendered(environments):
        if preset.name not in {p for _, p in gpu}:
            assert not set(CACHES) & set(env_vars), preset.name
    for (_, preset), (inductor, triton) in gpu.items():
        for folder in (inductor, triton):
            assert folder.startswith(f"{CLUSTER_COMPILE_CACHE_ROOT}/{preset}/"), folder
        assert CLUSTER_COMPILE_CACHE_ROOT.startswith(FSX_MOUNT_PATH + "/")
        assert inductor != triton and os.path.dirname(inductor) == os.path.dirname(triton)


def test_each_preset_and_each_image_gets_its_own_cache_and_the_same_image_the_same_one(environments):
    first, again = cache_dirs(environments), cache_dirs(environments)
    assert first == again  # a restarted pod of the same run finds its kernels
    presets = {}
    for (_, preset), folders in first.items():
        presets.setdefault(preset, set()).add(folders)
    by_preset = {preset: folders.pop() for preset, folders in presets.items() if len(folders) == 1}
    assert len(set(by_preset.values())) == len(by_preset)  # no two presets share one
    newer = cache_dirs(environments, image=IMAGE.replace(":abc123", ":def456"))
    for key, folders in first.items():
        assert not set(folders) & set(newer[key]), key  # a new trainer image never reads an old one's kernels


def test_inductor_reads_its_cache_folder_from_the_variable_the_pods_set(monkeypatch, tmp_path):
    from torch._inductor.runtime.cache_dir_utils import cache_dir, triton_cache_dir
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    assert cache_dir() == str(tmp_path / "inductor")
    assert triton_cache_dir(0) == triton_cache_dir(7) == str(tmp_path / "triton")  # one copy for a node's GPUs


def test_triton_reads_its_cache_folder_from_the_variable_the_pods_set(monkeypatch, tmp_path):
    triton = pytest.importorskip("triton", reason="the CPU build of torch comes without Triton")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    assert triton.knobs.cache.dir == str(tmp_path)  # what FileCacheManager writes under (triton/runtime/cache.py)
