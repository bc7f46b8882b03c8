"""The LLM trainer's one job configuration, built once from the command line.

Each component gets its own small section (model, data, optimiser, checkpoint, parallelism,
metrics); the training loop reads fields, never the argument namespace. The job presets in
config/presets.py write their typed arguments through the same flags this parser reads.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from pathlib import Path

from config.memory import CHECKPOINTING_MODES
from config.models import MODELS, ModelConfig, model_config
from trainer.batching import add_global_batch_arguments
from trainer.checkpoint import CheckpointConfig
from config.paths import output_file
from trainer.cli import Parser, UsageError, checked_path, non_negative_int, positive_float, positive_int
from trainer.data import DataConfig
from trainer.dist import add_timeout_arguments
from trainer.hf_config import from_hf_config, read_config
from trainer.metrics import MetricsConfig
from trainer.optim import OptimConfig
from trainer.parallel import FSDP_MODES, ParallelConfig

DEFAULT_LR = {"tiny": 3e-3, "tiny-moe": 3e-3}  # tiny models learn a toy task in tens of steps only with a larger rate


@dataclass(frozen=True)
class ModelSpec:
    name: str  # an entry of config.models, or the Hugging Face directory's name
    config: ModelConfig
    init_from_hf: str | None = None  # start from these weights when no checkpoint of ours exists
    compile: bool = False  # torch.compile each decoder block and the loss
    activation_checkpointing: str = "none"  # none, selective or full (trainer/activation_checkpointing.py)
    loss_chunk_tokens: int = 0  # chunked output layer + loss; 0 = off
    float8: bool = False  # float8 linears through torchao (trainer/float8.py)


@dataclass(frozen=True)
class JobConfig:
    model: ModelSpec
    data: DataConfig
    optim: OptimConfig
    checkpoint: CheckpointConfig
    parallel: ParallelConfig
    metrics: MetricsConfig

    @property
    def steps(self) -> int:
        return self.optim.total_steps


def parser() -> Parser:
    p = Parser(prog="python -m trainer.llm", description="FSDP2 training of a Llama-family decoder.")
    p.add_argument("--model", choices=sorted(MODELS), default=None,
                   help="model dimensions (default: tiny, or the --init-from-hf config)")
    p.add_argument("--init-from-hf", default=None, metavar="DIR",
                   help="start from a Hugging Face checkpoint directory (config.json + *.safetensors) when no "
                        "checkpoint of ours exists yet; the model comes from its config.json")
    p.add_argument("--loss-chunk-tokens", type=non_negative_int, default=0,
                   help="compute the output layer and loss this many tokens at a time, never holding all "
                        "logits (saves ~10 GiB at seq 8192 with a 128k vocabulary); 0 = off")
    p.add_argument("--layers", type=positive_int, default=None, help="override the model's layer count (benchmarks)")
    p.add_argument("--steps", type=positive_int, default=40, help="total optimizer steps, counting resumed ones")
    p.add_argument("--batch-size", type=positive_int, default=4,
                   help="sequences per rank per forward and backward pass (the micro-batch)")
    add_global_batch_arguments(p, "sequences")
    p.add_argument("--seq-len", type=positive_int, default=128, help="tokens per sequence")
    p.add_argument("--data", default="synthetic", help="'synthetic' or a directory of token shards (trainer.data prepare)")
    p.add_argument("--lr", type=positive_float, default=None, help="peak learning rate (default: 3e-3 for tiny, else 3e-4)")
    p.add_argument("--warmup-steps", type=non_negative_int, default=10)
    p.add_argument("--max-grad-norm", type=positive_float, default=1.0)
    p.add_argument("--max-nonfinite-steps", type=positive_int, default=10,
                   help="stop (exit 3) after this many steps in a row with a non-finite loss or gradient norm; "
                        "each such step is skipped, not applied")
    p.add_argument("--checkpoint-dir", default=None, help="where checkpoints are saved and resumed from (none: no checkpoints)")
    p.add_argument("--checkpoint-every", type=positive_int, default=100, help="steps between checkpoints")
    p.add_argument("--keep-checkpoints", type=positive_int, default=2, help="newest complete checkpoints kept")
    p.add_argument("--sync-checkpoint", action="store_true", help="save synchronously (benchmarks compare)")
    p.add_argument("--allow-fresh-start", action="store_true",
                   help="when checkpoints exist and every one of them is damaged, train from step 1 instead of "
                        "stopping (they are kept)")
    p.add_argument("--log-every", type=positive_int, default=10, help="steps between metrics lines")
    p.add_argument("--metrics-file", default=None, help="append metrics as JSON lines here (rank 0)")
    p.add_argument("--compile", action="store_true", help="torch.compile each decoder block")
    p.add_argument("--activation-checkpointing", nargs="?", const="full", default="none", choices=CHECKPOINTING_MODES,
                   help="recompute block activations in backward: selective keeps the matmul and attention outputs "
                        "and recomputes the cheap ops, full keeps only each block's input; the flag alone means full")
    p.add_argument("--float8", action="store_true",
                   help="train the decoder's linear layers in float8 through torchao (and all-gather their weights "
                        "in float8 under FSDP2); needs compute capability 8.9 or newer: H100, H200")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of the initial weights, the order of the data and the synthetic tokens")
    p.add_argument("--fsdp", choices=FSDP_MODES, default="auto",
                   help="auto: shard with FSDP2 when there is more than one rank; always: on one rank too")
    add_timeout_arguments(p)
    return p


def _model(args) -> tuple[str, ModelConfig]:
    if not args.init_from_hf:
        name = args.model or "tiny"
        return name, model_config(name, n_layers=args.layers)
    directory = Path(args.init_from_hf)
    hf = from_hf_config(read_config(directory), f"--init-from-hf: {directory / 'config.json'}")
    if args.layers:
        raise UsageError("--layers", "cannot change the layer count of a Hugging Face checkpoint")
    if args.model:
        table = MODELS[args.model]
        for f in fields(ModelConfig):
            if f.name != "max_seq_len" and getattr(table, f.name) != getattr(hf, f.name):
                raise UsageError("--model", f"{args.model} has {f.name} {getattr(table, f.name)!r} but "
                                            f"{directory / 'config.json'} gives {getattr(hf, f.name)!r}; "
                                            "drop --model to take the checkpoint's")
    return args.model or directory.name, hf


def parse_job(argv=None) -> JobConfig:
    args = parser().parse_args(argv)
    if args.metrics_file:  # rank 0 opens it after the model is built: a bad path is found now
        checked_path("--metrics-file", output_file, args.metrics_file)
    name, mcfg = _model(args)
    if args.seq_len > mcfg.max_seq_len:
        raise UsageError("--seq-len", f"{args.seq_len} is longer than {name}'s context of {mcfg.max_seq_len}")
    return JobConfig(
        model=ModelSpec(name, mcfg, args.init_from_hf, args.compile, args.activation_checkpointing,
                        args.loss_chunk_tokens, args.float8),
        data=DataConfig(args.data, args.batch_size, args.seq_len, args.seed, args.global_batch_size,
                        args.allow_global_batch_change),
        optim=OptimConfig(lr=args.lr or DEFAULT_LR.get(name, OptimConfig.lr),
                          warmup_steps=min(args.warmup_steps, args.steps // 2),  # short runs still decay
                          total_steps=args.steps, max_grad_norm=args.max_grad_norm,
                          max_nonfinite_steps=args.max_nonfinite_steps),
        checkpoint=CheckpointConfig(args.checkpoint_dir, args.checkpoint_every, args.keep_checkpoints,
                                    not args.sync_checkpoint, args.allow_fresh_start),
        parallel=ParallelConfig(args.dist_timeout, args.startup_timeout, args.fsdp),
        metrics=MetricsConfig(args.log_every, args.metrics_file),
    )
