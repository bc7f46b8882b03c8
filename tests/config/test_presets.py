"""Job presets: one workload command for the cluster and the laptop."""

import re

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


@pytest.mark.parametrize("name", sorted(n for n, p in PRESETS.items() if p.module == "trainer.llm"))
def test_every_llm_preset_parses_with_the_trainers_own_parser_into_its_typed_values(name, monkeypatch):
    preset = PRESETS[name]
    w = preset.workload
    import trainer.job_config as job_config
    from config.models import MODELS
    from trainer.hf_config import to_hf_config

    if w.init_from_hf:
        # The Hugging Face directory is read at parse time: stand in the table's model for it.
        from config.checkpoint_time import preset_model
        _, cfg = preset_model(preset)
        monkeypatch.setattr(job_config, "read_config", lambda directory: to_hf_config(cfg, "bfloat16"))
    job = job_config.parse_job(preset.workload_args("/ck"))
    assert job.steps == w.steps and job.data.batch_size == w.batch_size and job.data.seq_len == w.seq_len
    assert job.data.global_batch_size == w.global_batch_size
    assert job.checkpoint.directory == f"/ck/{name}" and job.metrics.metrics_file == f"/ck/{name}/metrics.jsonl"
    assert job.model.activation_checkpointing == (w.activation_checkpointing or "none")
    assert job.model.compile == w.compile and job.model.float8 == w.float8
    if w.model:
        assert job.model.config == MODELS[w.model]
    if w.lr:
        assert job.optim.lr == w.lr
    if w.data:
        assert job.data.source == w.data


def test_the_ddp_preset_parses_with_its_trainers_parser():
    from trainer.ddp import parse_args
    args = parse_args(get_preset("cpu-ddp").workload_args("/ck"))
    assert (args.epochs, args.save_every, args.batch_size, args.snapshot_path) == (20, 2, 64, "/ck/cpu-ddp/snapshot.pt")


def test_the_fine_tuning_preset_starts_from_fsx_weights():
    tune = get_preset("llama2-7b-finetune").workload
    assert tune.init_from_hf == "/fsx/models/Llama-2-7b-hf" and tune.lr < 1e-4
    assert get_preset("llama2-7b-finetune").workload_args()[
        get_preset("llama2-7b-finetune").workload_args().index("--checkpoint-dir") + 1].startswith("/fsx/checkpoints/")


def test_every_model_the_reference_lists_has_a_preset():
    models = {p.workload.model for p in PRESETS.values() if p.module == "trainer.llm"}
    assert {"llama2-7b", "llama2-13b", "llama2-70b", "llama3.1-8b", "llama3.1-70b", "llama3.2-1b", "llama3.2-3b",
            "mixtral-8x7b", "mathstral-7b"} <= models


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_names_are_job_names_kubernetes_accepts(name):
    # The PyTorchJob is named after the preset: a DNS label, so no dots (llama31, not llama3.1).
    assert re.fullmatch(r"[a-z][a-z0-9-]{0,47}", name)


@pytest.mark.parametrize("name", sorted(n for n, p in PRESETS.items() if p.module == "trainer.vision"))
def test_every_vision_preset_parses_with_the_trainers_own_parser(name):
    from trainer.vision import parse_config
    w = get_preset(name).workload
    cfg = parse_config(get_preset(name).workload_args("/ck"))
    assert (cfg.model.name, cfg.optim.epochs, cfg.data.batch_size, cfg.data.source) == (w.model, w.epochs,
                                                                                        w.batch_size, w.data)
    assert cfg.data.global_batch_size == w.global_batch_size
    assert cfg.checkpoint.directory == f"/ck/{name}" and cfg.metrics_file == f"/ck/{name}/metrics.jsonl"


def test_the_imagenet_presets_are_elastic_on_p4d_reading_fsx_and_vision_tiny_runs_on_cpu():
    for name, model in (("resnet50-imagenet", "resnet50"), ("efficientnetb7-imagenet", "efficientnet_b7")):
        preset = get_preset(name)
        assert preset.workload.model == model and preset.workload.data == "/fsx/data/imagenet"
        assert (preset.nodegroup, preset.image_variant, preset.nodes_min, preset.nodes_max) == ("p4d", "gpu", 1, 3)
        assert preset.rendezvous == "etcd" and preset.nproc_per_node is None
        assert preset.workload.workers == 4  # data-loader processes per GPU, as the reference ran
        assert preset.job_dir().startswith(CLUSTER_CHECKPOINT_ROOT)
    tiny = get_preset("vision-tiny")
    assert (tiny.nodegroup, tiny.image_variant, tiny.workload.data, tiny.workload.model) == \
        ("cpu", "cpu", "synthetic", "resnet18")
    assert tiny.cluster and tiny.nodes_min < tiny.nodes_max


def _ranks_per_node(preset) -> int:
    """The preset's processes per node: its own number, or one per GPU of its node group's instance
    type (the same group name has the same instance type in every environment of cdk.json)."""
    if preset.nproc_per_node:
        return preset.nproc_per_node
    from config import load_environment
    from config.environment import Environment
    from ops.envconfig import read_environments
    environments = read_environments()
    types = set()
    for name in environments:
        env: Environment = load_environment(environments, name)
        types |= {g.instance_type for g in env.training_nodegroups if g.name == preset.nodegroup}
    assert len(types) == 1, (preset.name, types)
    return types.pop().gpus


@pytest.mark.parametrize("name", sorted(n for n, p in PRESETS.items() if p.module in ("trainer.llm", "trainer.vision")))
def test_every_preset_global_batch_divides_over_every_node_count_it_runs_on_and_under_make_local(name):
    # Otherwise the trainer refuses to start (exit 2) when an elastic job re-forms on fewer nodes.
    preset = PRESETS[name]
    w = preset.workload
    per_node = _ranks_per_node(preset)
    worlds = [nodes * per_node for nodes in range(preset.nodes_min, preset.nodes_max + 1)] + [preset.local_nproc]
    for world in worlds:
        assert w.global_batch_size % (world * w.batch_size) == 0, (name, world, w.batch_size, w.global_batch_size)


GPU_LLM_PRESETS = sorted(n for n, p in PRESETS.items() if p.module == "trainer.llm" and p.image_variant == "gpu")


@pytest.mark.parametrize("name", GPU_LLM_PRESETS)
def test_every_gpu_llm_preset_recomputes_as_little_as_its_gpus_memory_allows(name):
    """The memory estimate fits the preset's mode on its GPUs, and no cheaper mode: none before
    selective before full."""
    from config.instance_types import INSTANCE_TYPES
    from config.memory import CHECKPOINTING_MODES, estimate_memory, usable_device_bytes
    from config.models import MODELS
    from config.presets import SIZED_FOR

    preset = PRESETS[name]
    w, it = preset.workload, INSTANCE_TYPES[SIZED_FOR[preset.nodegroup]]
    assert it.name in preset.description  # the description names the type it is sized for

    def fits(mode):
        estimate = estimate_memory(MODELS[w.model], shards=preset.nodes_min * it.gpus, batch_size=w.batch_size,
                                   seq_len=w.seq_len, activation_checkpointing=mode, mixed_precision=True,
                                   loss_chunk_tokens=w.loss_chunk_tokens or 0)
        return estimate.total <= usable_device_bytes(it, it.gpus)

    chosen = CHECKPOINTING_MODES.index(w.activation_checkpointing)
    assert fits(w.activation_checkpointing)
    assert not any(fits(cheaper) for cheaper in CHECKPOINTING_MODES[:chosen])


def test_a_preset_that_fits_no_mode_is_refused_when_defined():
    from config.presets import fitting_checkpointing
    with pytest.raises(ValueError, match="does not fit 1 p4d.24xlarge even with full activation checkpointing"):
        fitting_checkpointing("llama2-70b", "p4d", 1, batch_size=1, seq_len=4096)
