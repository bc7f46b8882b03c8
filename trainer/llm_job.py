"""trainer.llm's one job configuration, built once from the command line.

The options are declared in config/workloads/llm.py (LlmJobConfig: one section per component),
where the job presets write them too. Parsing fills in what the command line leaves to the
trainer: the model's name and shape (from the model table, or a Hugging Face directory's
config.json), the peak learning rate's default, and a warm-up that fits the run. The training
loop reads the fields of the result, never the argument namespace.
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

from config.models import MODELS, ModelConfig, model_config
from config.workloads.llm import DecoderConfig, LlmJobConfig
from trainer.cli import UsageError, parse_config
from trainer.hf_config import from_hf_config, read_config
from trainer.metrics import check_metrics_file

DEFAULT_LR = {"tiny": 3e-3, "tiny-moe": 3e-3}  # tiny models learn a toy task in tens of steps only with a larger rate
DEFAULT_PEAK_LR = 3e-4


def resolve_decoder(cfg: DecoderConfig) -> DecoderConfig:
    """The model's name and shape: the table's entry (--model, default tiny), or a Hugging Face
    directory's config.json (--init-from-hf), which --model, when given too, must match."""
    if not cfg.init_from_hf:
        name = cfg.name or "tiny"
        return replace(cfg, name=name, shape=model_config(name, n_layers=cfg.layers))
    directory = Path(cfg.init_from_hf)
    hf = from_hf_config(read_config(directory), f"--init-from-hf: {directory / 'config.json'}")
    if cfg.layers:
        raise UsageError("--layers", "cannot change the layer count of a Hugging Face checkpoint")
    if cfg.name:
        table = MODELS[cfg.name]
        for f in fields(ModelConfig):
            if f.name != "max_seq_len" and getattr(table, f.name) != getattr(hf, f.name):
                raise UsageError("--model", f"{cfg.name} has {f.name} {getattr(table, f.name)!r} but "
                                            f"{directory / 'config.json'} gives {getattr(hf, f.name)!r}; "
                                            "drop --model to take the checkpoint's")
    return replace(cfg, name=cfg.name or directory.name, shape=hf)


def parse_job(argv=None) -> LlmJobConfig:
    job = parse_config(LlmJobConfig, argv)
    check_metrics_file(job.metrics)
    return resolve(job)


def resolve(job: LlmJobConfig) -> LlmJobConfig:
    """`job` with what its options leave to the trainer filled in: the model's name and shape, the
    peak learning rate, a warm-up of at most half the run."""
    model = resolve_decoder(job.model)
    if job.batch.seq_len > model.shape.max_seq_len:
        raise UsageError("--seq-len", f"{job.batch.seq_len} is longer than {model.name}'s context of "
                                      f"{model.shape.max_seq_len}")
    optimizer = replace(job.optimizer, lr=job.optimizer.lr or DEFAULT_LR.get(model.name, DEFAULT_PEAK_LR),
                        warmup_steps=min(job.optimizer.warmup_steps, job.steps // 2))  # short runs still decay
    return replace(job, model=model, optimizer=optimizer)
