"""Job presets: one workload command for the cluster and the laptop."""

from dataclasses import replace

import pytest

from config import ConfigError
from config.kubernetes import JOB_NAME_PATTERN
from config.models import MODELS
from config.presets import CLUSTER_CHECKPOINT_ROOT, PRESETS, RENDEZVOUS_BACKENDS, get_preset


def test_cluster_and_local_commands_differ_only_in_checkpoint_root():
    preset = get_preset("cpu-ddp")
    cluster, local = preset.workload_args(), preset.workload_args(".local/checkpoints")
    assert len(cluster) == len(local)
    differing = [(c, l) for c, l in zip(cluster, local) if c != l]
    assert differing and all(c.startswith(CLUSTER_CHECKPOINT_ROOT) and l.startswith(".local/checkpoints")
                             for c, l in differing)


def test_command_runs_the_preset_module_under_torchrun():
    command = get_preset("llm-tiny").command()
    assert command[:5] == ["python", "-m", "trainer.launch", "--module", "trainer.llm"]
    assert "{checkpoint_root}" not in " ".join(command)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_has_a_valid_topology_and_a_rendezvous_backend_torchrun_knows(name):
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry
    import torch.distributed.elastic.rendezvous.registry  # noqa: F401  (registers torch's backends)

    preset = PRESETS[name]
    assert 1 <= preset.nodes_min <= preset.nodes_max
    assert preset.rendezvous in RENDEZVOUS_BACKENDS
    assert preset.image_variant in ("cpu", "gpu")
    assert preset.torch_rdzv_backend in rendezvous_handler_registry._registry


def test_each_rendezvous_choice_is_a_backend_torchrun_knows():
    """torchrun looks its --rdzv-backend (and the operator passes elasticPolicy.rdzvBackend as it) up
    in torch's handler registry (torch/distributed/elastic/rendezvous/registry.py); an unknown name
    fails every worker at start. Our "etcd" choice is torch's etcd-v2 backend (the dynamic rendezvous
    over etcd, etcd_rendezvous_backend.py), not its legacy "etcd" handler (etcd_rendezvous.py)."""
    from torch.distributed.elastic.rendezvous import rendezvous_handler_registry

    preset = get_preset("cpu-ddp")
    backends = {choice: replace(preset, rendezvous=choice).torch_rdzv_backend for choice in RENDEZVOUS_BACKENDS}
    assert backends == {"etcd": "etcd-v2", "c10d": "c10d"}
    assert set(backends.values()) <= set(rendezvous_handler_registry._registry)


def test_unknown_preset_names_the_known_ones():
    with pytest.raises(ConfigError) as err:
        get_preset("llama-9000")
    assert err.value.line() == (
        "config error: preset: unknown preset 'llama-9000'; presets are " + ", ".join(PRESETS)
    )


def _parse(preset, monkeypatch):
    """The preset's arguments parsed by its trainer's own parser, resolved as the trainer does."""
    if preset.module == "trainer.llm":
        import trainer.llm_job as llm_job
        from trainer.hf_config import to_hf_config

        if preset.workload.init_from_hf:
            # The Hugging Face directory is read at parse time: stand in the table's model for it.
            from config.checkpoint_time import preset_model
            _, cfg = preset_model(preset)
            monkeypatch.setattr(llm_job, "read_config", lambda directory: to_hf_config(cfg, "bfloat16"))
        return llm_job.parse_job(preset.workload_args("/ck"))
    from trainer.ddp import parse_job as ddp_job
    from trainer.vision import parse_job as vision_job
    return {"trainer.vision": vision_job, "trainer.ddp": ddp_job}[preset.module](preset.workload_args("/ck"))


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_parses_with_its_trainers_own_parser_into_the_values_it_gives(name, monkeypatch):
    from config.options import leaf

    preset = PRESETS[name]
    job = _parse(preset, monkeypatch)
    given = {**preset.workload.values, **preset.workload.config.job_outputs(f"/ck/{name}")}
    for dest, value in given.items():
        if isinstance(value, str):
            value = value.replace("{checkpoint_root}", "/ck")
        option = leaf(type(job), dest)
        assert option.value(job) == option.typed(value), (dest, value)
    if preset.module == "trainer.llm":
        assert job.model.shape == MODELS[preset.workload.model]  # every LLM preset names the table's model
        assert job.checkpoint.directory == f"/ck/{name}" and job.metrics.file == f"/ck/{name}/metrics.jsonl"


def test_the_fine_tuning_preset_starts_from_fsx_weights():
    tune = get_preset("llama2-7b-finetune").workload
    assert tune.init_from_hf == "/fsx/models/Llama-2-7b-hf" and tune.lr < 1e-4
    args = get_preset("llama2-7b-finetune").workload_args()
    assert args[args.index("--checkpoint-dir") + 1] == "/fsx/checkpoints/llama2-7b-finetune"


def test_every_model_the_reference_lists_has_a_preset():
    models = {p.workload.model for p in PRESETS.values() if p.module == "trainer.llm"}
    assert {"llama2-7b", "llama2-13b", "llama2-70b", "llama3.1-8b", "llama3.1-70b", "llama3.2-1b", "llama3.2-3b",
            "mixtral-8x7b", "mathstral-7b"} <= models


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_preset_names_are_job_names_kubernetes_accepts(name):
    # The PyTorchJob is named after the preset: a DNS label, so no dots (llama31, not llama3.1).
    assert JOB_NAME_PATTERN.match(name)


def test_the_imagenet_presets_are_elastic_on_p4d_reading_fsx_and_vision_tiny_runs_on_cpu():
    for name, model in (("resnet50-imagenet", "resnet50"), ("efficientnetb7-imagenet", "efficientnet_b7")):
        preset = get_preset(name)
        assert preset.workload.model == model and preset.workload.data == "/fsx/data/imagenet"
        assert (preset.nodegroup, preset.image_variant, preset.nodes_min, preset.nodes_max) == ("p4d", "gpu", 1, 3)
        assert preset.rendezvous == "etcd" and preset.nproc_per_node is None
        assert preset.workload.workers == 8  # per GPU, from p4d's vCPUs (tests/config/test_vision_recipes.py)
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
