"""Job presets: one workload command for the cluster and the laptop."""

import pytest

from config import ConfigError
from config.presets import CLUSTER_CHECKPOINT_ROOT, PRESETS, get_preset


def test_cluster_and_local_commands_differ_only_in_checkpoint_root():
    preset = get_preset("cpu-ddp")
    cluster, local = preset.workload_args(), preset.workload_args(".local/checkpoints")
    assert len(cluster) == len(local)
    differing = [(c, l) for c, l in zip(cluster, local) if c != l]
    assert differing and all(c.startswith(CLUSTER_CHECKPOINT_ROOT) and l.startswith(".local/checkpoints")
                             for c, l in differing)


def test_command_runs_the_preset_module_under_torchrun():
    command = get_preset("llm-tiny").command()
    assert command[:3] == ["torchrun", "--module", "trainer.llm"]
    assert "{checkpoint_root}" not in " ".join(command)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_has_a_valid_topology(name):
    preset = PRESETS[name]
    assert 1 <= preset.nodes_min <= preset.nodes_max
    assert preset.rendezvous in ("etcd", "c10d")
    assert preset.image_variant in ("cpu", "gpu")
    assert preset.torch_rdzv_backend in ("etcd-v2", "c10d")


def test_unknown_preset_names_the_known_ones():
    with pytest.raises(ConfigError) as err:
        get_preset("llama-9000")
    assert err.value.line() == (
        "config error: preset: unknown preset 'llama-9000'; presets are " + ", ".join(PRESETS)
    )
