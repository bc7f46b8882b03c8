"""Hostile paths for every command: one line naming the argument, exit 2, no traceback, no hang,
and nothing half-written.

Every path-like argument of every `python -m ops` command and of every trainer command is found
from the parsers themselves (a new command or argument is swept, or this module fails until it is
listed), then given: a missing path, a directory where a file belongs (a file where a directory
belongs), a binary file, a non-UTF-8 file, a named pipe (opened, it waits for ever for its other
end), a file of the wrong shape, and for outputs a path that
cannot be created (under a regular file, or under /proc: the tests run as root, and root may write
anywhere else). Commands run in this process with a deadline (tests/cli_sweep.py).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import tempfile
from pathlib import Path

import pytest

from cli_sweep import (BINARY, NOT_UTF8, PROC, UNENTERABLE, Case, arguments_of, captured_parser, denied_as_a_user,
                       entry, looks_like_a_path, modules_with_a_main, new_files, run_in_process, tree, unenterable)

DEADLINE_S = 60

# --- the commands --------------------------------------------------------------------------------

TRAINER_CLIS = ["trainer.llm", "trainer.vision", "trainer.ddp", "trainer.data", "trainer.hf", "trainer.s3sync",
                "trainer.hf_download", "trainer.plot"]
# Modules with a __main__ that take no path from a user, with the reason.
NOT_SWEPT = {
    "app": "the CDK app: reads cdk.json context, takes no arguments",
    "ops.proc_watchdog": "not for users: ops.proc starts it with a pipe's file descriptor",
    "ops.remote_validation": "the pipeline's step: a project name, a role ARN and a region, no paths",
    "ops.lockfile": "a maintainer's tool run by `make lock`: its paths come from the Makefile",
    "ops.policy_scan": "run by `make lint` and its test: its paths come from the Makefile",
    "trainer.launch": "the pod's command: torchrun's own options (its argparse refuses a bad one, exit 2), then the "
                      "workload module's arguments, whose paths are swept as that module's",
    "bench.gpu_mfu": "benchmark: no path arguments",
    "bench.recovery": "benchmark: no path arguments",
    "bench.preemption": "benchmark: no path arguments",
    "bench.step_overhead": "benchmark: no path arguments",
    "bench.launch_to_first_step": "benchmark: no path arguments (its folders are temporary ones of its own)",
    "bench.vision_loader": "benchmark: no path arguments",
    "bench.vision_resize": "benchmark: no path arguments",
    "bench.gpu_vision": "benchmark run by the lead on a GPU: --out is checked with config.paths.output_file first",
    # Each starts minutes of work once its arguments parse; each checks its path before starting.
    "bench.dcp_async": "benchmark run by a developer: --dir is checked with config.paths.output_dir first",
    "bench.scaling": "benchmark run by a developer: --output is checked with config.paths.output_file first",
    "bench.gpu_llm": "benchmark run by a developer: --out is checked with config.paths.output_file first",
    "bench.activation_checkpointing": "benchmark: no path arguments",
    "bench.profile_summary": "a developer's reader of py-spy output: its one path is given hostile files in "
                             "tests/test_bench_profile_summary.py",
}
# Arguments whose names look like paths but are not.
NOT_PATHS = {
    "ops synth-summary --output": "-o table|json", "ops preflight --output": "-o table|json",
    "ops az-recommend --output": "-o table|json", "ops status --output": "-o table|json",
    "ops plan --output": "-o table|json", "ops doctor --output": "-o table|json",
    "ops validate --timeout": "seconds", "ops local --timeout": "seconds",
    "trainer.llm --checkpoint-every": "steps", "trainer.llm --keep-checkpoints": "a count",
    "trainer.llm --dist-timeout": "seconds", "trainer.vision --checkpoint-every": "steps",
    "trainer.vision --keep-checkpoints": "a count", "trainer.vision --dist-timeout": "seconds",
    "trainer.ddp --dist-timeout": "seconds", "trainer.s3sync --src": "an s3:// URI",
    "trainer.llm --max-nonfinite-steps": "a count", "trainer.llm --startup-timeout": "seconds",
    "trainer.vision --max-nonfinite-steps": "a count",
    "trainer.vision --startup-timeout": "seconds", "trainer.ddp --startup-timeout": "seconds",
    "trainer.llm --activation-checkpointing": "none|selective|full",
    "ops preflight --abandon-file-system": "an FSx file system id (fs-...)",
}


def all_arguments():
    from ops.cli import build_parser

    args = arguments_of("ops", build_parser())
    for cli in TRAINER_CLIS:
        main = __import__(cli, fromlist=["main"]).main
        args += arguments_of(cli, captured_parser(main, []))
    from trainer.plot import scaling_main
    args += arguments_of("trainer.plot", captured_parser(scaling_main, []), "scaling")
    return args


# --- hostile paths -------------------------------------------------------------------------------

def _file(name: str, data: bytes | str, mode: int = 0o644):
    def make(tmp: Path) -> Path:
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data.encode() if isinstance(data, str) else data)
        path.chmod(mode)
        return path
    return make


def _folder(**files: bytes | str):
    """A directory holding these files (names with '__' for '/')."""
    def make(tmp: Path) -> Path:
        root = tmp / "folder"
        root.mkdir()
        for name, data in files.items():
            _file(name.replace("__", "/"), data)(root)
        return root
    return make


def _dir(tmp: Path) -> Path:
    (tmp / "a-directory").mkdir()
    return tmp / "a-directory"


def _under_file(tmp: Path) -> Path:
    (tmp / "a-file").write_text("not a directory\n")
    return tmp / "a-file" / "out"


def _in_unenterable(tmp: Path) -> Path:
    return unenterable(tmp) / "out"


def _fifo(tmp: Path) -> Path:
    """A named pipe no one writes to or reads from: opening it, to read or to write, waits for the
    other end for ever."""
    os.mkfifo(tmp / "fifo")
    return tmp / "fifo"


def _dangling(tmp: Path) -> Path:
    """A symbolic link to nothing: it exists as a name, yet nothing can be read or made through it."""
    (tmp / "dangling").symlink_to(tmp / "nowhere")
    return tmp / "dangling"


def _read_only(tmp: Path) -> Path:
    folder = tmp / "read-only"
    folder.mkdir(exist_ok=True)
    folder.chmod(0o555)
    return folder


# A name may hold a line break; the line that names it must stay one line.
NEWLINE = {"missing, a line break in its name": lambda tmp: tmp / "missing\nname"}
A_FILE_NEWLINE = {"a file, a line break in its name": _file("a-file\nname", "keep me\n")}
DANGLING = {"a dangling symlink": _dangling}
# Folders closed to the trainer image's uid 1000; root runs these cases as a user (denied_as_a_user).
READ_ONLY = "read-only"
IN_LOCKED = {f"in an {UNENTERABLE} folder": _in_unenterable}
LOCKED = {UNENTERABLE: unenterable, **IN_LOCKED}
# An output's folder may be entered but not written to.
OUT_LOCKED = {f"in a {READ_ONLY} folder": lambda tmp: _read_only(tmp) / "out"}
FIFO = "a named pipe"
KINDS = {
    "in-file": {"missing": lambda tmp: tmp / "missing", **NEWLINE, **DANGLING, "directory": _dir,
                "binary": _file("binary", BINARY), "non-utf8": _file("latin1", NOT_UTF8), FIFO: _fifo, **IN_LOCKED},
    "in-dir": {"missing": lambda tmp: tmp / "missing", **NEWLINE, **DANGLING,
               "a file": _file("a-file", "a file, not a directory\n"), **A_FILE_NEWLINE, FIFO: _fifo, **LOCKED},
    "in-any": {"missing": lambda tmp: tmp / "missing", **NEWLINE, **DANGLING, "binary": _file("binary", BINARY),
               "non-utf8": _file("latin1", NOT_UTF8), FIFO: _fifo, **LOCKED},
    "out-file": {"directory": _dir, "under a file": _under_file, "under /proc": lambda tmp: PROC / "cli-sweep.txt",
                 FIFO: _fifo, **IN_LOCKED, **OUT_LOCKED},
    "out-dir": {"a file": _file("a-file", "keep me\n"), **A_FILE_NEWLINE, "under a file": _under_file,
                "under /proc": lambda tmp: PROC / "cli-sweep", FIFO: _fifo, **DANGLING, READ_ONLY: _read_only,
                **LOCKED, **OUT_LOCKED},
    # Read when it exists (a missing one is a fresh start), written as the run goes.
    "state-file": {"directory": _dir, "binary": _file("binary", BINARY), "non-utf8": _file("latin1", NOT_UTF8),
                   "under a file": _under_file, "under /proc": lambda tmp: PROC / "cli-sweep.txt", FIFO: _fifo,
                   **IN_LOCKED, **OUT_LOCKED},
    "exe": {"missing": lambda tmp: tmp / "missing", **NEWLINE, **DANGLING, "directory": _dir,
            "not executable": _file("etcd", "#!/bin/sh\n", 0o644), "binary": _file("etcd", BINARY, 0o755),
            FIFO: _fifo},
}
# Arguments that read a pipe on purpose (`--from-file <(pass show hf)`): a named pipe is read as
# its writer gives it, as `cat` would; tests/ops/test_ops_model.py reads a token from one.
READS_PIPES = {"--from-file"}

CHECKPOINT_STEP = {"step-00000001__COMPLETE": ""}
SHAPES = {
    "--context-file": {"a JSON list": _file("ctx.json", "[1, 2]\n"),
                       "environments a list": _file("ctx.json", '{"context": {"environments": []}}\n')},
    "--kubeconfig": {"a YAML list": _file("kubeconfig", "- a\n- b\n"), "not YAML": _file("kubeconfig", "a: [\n"),
                     "clusters a number": _file("kubeconfig", "apiVersion: v1\nkind: Config\nclusters: 3\n")},
    # The file `aws eks update-kubeconfig` updates: checked to be YAML before AWS is asked; its
    # contents are the AWS CLI's to judge.
    "ops kubeconfig --kubeconfig": {"a YAML list": _file("kubeconfig", "- a\n- b\n"),
                                    "not YAML": _file("kubeconfig", "a: [\n")},
    "--from-file": {"two words": _file("token", "hf_abc def\n"), "empty": _file("token", "\n")},
    "--etcd": {"not etcd": _file("etcd", "#!/bin/sh\necho not etcd\nexit 1\n", 0o755)},
    "--dist": {"binary YAML": _folder(**{"cluster-validation.yaml": BINARY}),
               "not YAML": _folder(**{"cluster-validation.yaml": "a: [\n"}),
               "a YAML list of strings": _folder(**{"cluster-validation.yaml": "- a\n- b\n"}),
               "no validation YAML": _folder(**{"other.yaml": "a: 1\n"})},
    "--init-from-hf": {"config.json binary": _folder(**{"config.json": BINARY}),
                       "config.json a list": _folder(**{"config.json": "[]"}),
                       "config.json wrong types": _folder(**{"config.json": '{"model_type": "llama", "hidden_size": "big", '
                                                                            '"num_attention_heads": [], "rope_scaling": 3}'})},
    "trainer.llm --data": {"meta.json a list": _folder(**{"meta.json": "[]"}),
                           "meta.json binary": _folder(**{"meta.json": BINARY}), "empty": _folder(),
                           "meta.json vocab_size a string": _folder(**{"meta.json": '{"dtype": "uint16", "vocab_size": '
                                                                                    '"1024", "shards": ["s.bin"]}',
                                                                      "s.bin": bytes(64)}),
                           # tiny's vocabulary is 1024: ids of 5000, and no vocab_size to say so
                           "token ids past the vocabulary": _folder(**{"meta.json": '{"dtype": "uint16", '
                                                                                    '"shards": ["s.bin"]}',
                                                                      "s.bin": (5000).to_bytes(2, "little") * 32})},
    "trainer.vision --data": {"no train/": _folder(**{"val__x": "x"})},
    "--checkpoint-dir": {"model.json a list": _folder(**{"model.json": "[]", **CHECKPOINT_STEP}),
                         "model.json binary": _folder(**{"model.json": BINARY})},
    "--init-from": {"a JSON file": _file("weights.pt", "{}\n")},
    "--snapshot-path": {"a JSON file": _file("snapshot.pt", "{}\n")},
    "--tokenizer": {"a JSON list": _file("tokenizer.json", "[]\n")},
    "--input": {"corrupt .gz": _file("docs.jsonl.gz", b"\x1f\x8b\x08\x00" + BINARY),
                "truncated .gz": _file("docs.jsonl.gz", gzip.compress(b'{"text": "hello"}\n' * 500)[:60]),
                "binary .jsonl": _file("docs.jsonl", BINARY), "JSON lines of lists": _file("docs.jsonl", "[1]\n")},
    "--src": {"binary synset list": _folder(**{"LOC_synset_mapping.txt": BINARY, "LOC_val_solution.csv": "x\n"}),
              "non-UTF-8 synset list": _folder(**{"LOC_synset_mapping.txt": NOT_UTF8, "LOC_val_solution.csv": "x\n"})},
    "export --checkpoint": {"model.json a list": _folder(**{"model.json": "[]", **CHECKPOINT_STEP}),
                            "model.json wrong types": _folder(**{"model.json": '{"model": {"dim": "big"}}',
                                                                 **CHECKPOINT_STEP}),
                            "model.json binary": _folder(**{"model.json": BINARY, **CHECKPOINT_STEP}),
                            "no checkpoint": _folder()},
    "verify directory": {"config.json binary": _folder(**{"config.json": BINARY}),
               "config.json a list": _folder(**{"config.json": "[]"})},
    "METRICS": {"lines of lists": _file("metrics.jsonl", "[1]\n"), "empty": _file("metrics.jsonl", "")},
    "RUN": {"no epoch lines": _file("metrics.jsonl", '{"step": 1, "loss": 1.0}\n')},
}


# --- which path each argument is, and the rest of the command line around it -------------------

PRESET = "cpu-ddp"
OPS_BASE = {
    "preflight": ["preflight", "--env", "dev"], "kubeconfig": ["kubeconfig", "--env", "dev"],
    "whoami": ["whoami", "--env", "dev"], "plan": ["plan", "--env", "dev"],
    "submit": ["submit", "--env", "dev", "--preset", PRESET, "--image", "img:1"],
    "start": ["start", PRESET, "--env", "dev", "--image", "img:1"], "stop": ["stop", PRESET], "status": ["status"], "logs": ["logs", "job"],
    "delete": ["delete", "job"], "capacity-block": ["capacity-block", "schedule", "--env", "dev"],
    "doctor": ["doctor", "--env", "dev"], "model token": ["model", "token", "--env", "dev"],
    "model download": ["model", "download", "--env", "dev", "--repo", "org/model", "--image", "img:1"],
    "model status": ["model", "status"], "model logs": ["model", "logs", "m"],
    "data": ["data", "--env", "dev", "--source", "c4", "--image", "img:1"],
    "local": ["local", "--checkpoint-root", "{tmp}/checkpoints"], "validate": ["validate"],
    "synth-summary": ["synth-summary", "--env", "dev"], "stacks": ["stacks", "--env", "dev"],
}
OPS_KINDS = {"--context-file": "in-file", "--kubeconfig": "in-file", "--from-file": "in-file",
             "--checkpoint-root": "out-dir", "--etcd": "exe", "--dist": "in-dir", "--outdir": "out-dir",
             "ops kubeconfig --kubeconfig": "out-file"}  # the file `aws eks update-kubeconfig` writes

LLM = ["--steps", "1", "--seq-len", "8", "--batch-size", "1"]
VISION = ["--epochs", "1", "--train-samples", "4", "--val-samples", "4", "--image-size", "16", "--batch-size", "2",
          "--workers", "0", "--classes", "2"]
PREPARE = {"--tokenizer": "{good}/hf/tokenizer.json", "--input": "{good}/text", "--output": "{tmp}/tokens"}
TRAINER = {
    "trainer.llm --init-from-hf": ("in-dir", [*LLM, "--init-from-hf", "{path}"]),
    "trainer.llm --data": ("in-dir", [*LLM, "--data", "{path}"]),
    "trainer.llm --checkpoint-dir": ("out-dir", [*LLM, "--checkpoint-dir", "{path}"]),
    "trainer.llm --metrics-file": ("out-file", [*LLM, "--metrics-file", "{path}"]),
    "trainer.vision --init-from": ("in-file", [*VISION, "--init-from", "{path}"]),
    "trainer.vision --data": ("in-dir", [*VISION, "--data", "{path}"]),
    "trainer.vision --checkpoint-dir": ("out-dir", [*VISION, "--checkpoint-dir", "{path}"]),
    "trainer.vision --metrics-file": ("out-file", [*VISION, "--metrics-file", "{path}"]),
    "trainer.ddp --snapshot-path": ("state-file", ["--epochs", "1", "--samples", "8", "--snapshot-path", "{path}"]),
    "trainer.data imagenet --src": ("in-dir", ["imagenet", "--src", "{path}", "--out", "{tmp}/imagenet"]),
    "trainer.data imagenet --out": ("out-dir", ["imagenet", "--src", "{good}/text", "--out", "{path}"]),
    **{f"trainer.data prepare {option}": ("out-dir" if option == "--output" else "in-any",
                                          ["prepare", *(x for o, v in PREPARE.items()
                                                        for x in (o, "{path}" if o == option else v))])
       for option in PREPARE},
    "trainer.hf export --checkpoint": ("in-dir", ["export", "--checkpoint", "{path}", "--out", "{tmp}/export"]),
    "trainer.hf export --out": ("out-dir", ["export", "--checkpoint", "{good}/checkpoints", "--out", "{path}"]),
    "trainer.hf export --tokenizer": ("in-dir", ["export", "--checkpoint", "{good}/checkpoints", "--out", "{tmp}/export",
                                                 "--tokenizer", "{path}"]),
    "trainer.hf tiny --out": ("out-dir", ["tiny", "--out", "{path}"]),
    "trainer.hf verify directory": ("in-dir", ["verify", "{path}"]),
    "trainer.s3sync --dest": ("out-dir", ["--src", "s3://bucket/prefix/", "--dest", "{path}"]),
    "trainer.hf_download --out": ("out-dir", ["--repo", "org/model", "--out", "{path}"]),
    "trainer.plot METRICS": ("in-file", ["{path}", "-o", "{tmp}/curves.png"]),
    "trainer.plot --output": ("out-file", ["{good}/metrics.jsonl", "-o", "{path}"]),
    "trainer.plot scaling RUN": ("in-any", ["scaling", "{path}", "{good}/runs/n2.jsonl", "-o", "{tmp}/scaling.png"]),
    "trainer.plot scaling --output": ("out-file", ["scaling", "{good}/runs/n1.jsonl", "{good}/runs/n2.jsonl",
                                                   "-o", "{path}"]),
}
# Arguments the base command refuses before reading them: the line names the argument and why,
# which is not the permission.
NOT_READ = {f"ops {command} --context-file": "read only with --env" for command in ("delete", "logs", "status", "stop")}
XFAIL: dict[str, str] = {}  # case id -> reason, for a known failure awaiting its fix (strict)
# Cases that are no fault for that argument: case id -> why the command rightly goes on.
NOT_HOSTILE = {
    **{f"{arg} [{READ_ONLY}]": "an empty folder there is replaced whole by the output, built beside it and renamed; "
                               "only the parent's permission counts"
       for arg in ("trainer.hf export --out", "trainer.data prepare --output")},
    f"trainer.hf_download --out [{READ_ONLY}]": "any folder there that is not a completed download is refused as such",
}


def _spec(arg) -> tuple[str, list[str]]:
    """(kinds, argv template) of a discovered argument; KeyError when the tables lack it."""
    if arg.cli != "ops":
        return TRAINER[arg.key]
    base = [a for a in OPS_BASE[arg.command]]
    if arg.name in base:  # the base names it already (local --checkpoint-root): replace its value
        del base[base.index(arg.name):base.index(arg.name) + 2]
    return OPS_KINDS.get(arg.key, OPS_KINDS[arg.name]), [*base, arg.name, "{path}"]


def _shapes(arg) -> dict:
    for key in (arg.key, f"{arg.command} {arg.name}".strip(), f"{arg.cli} {arg.name}", arg.name):
        if key in SHAPES:
            return SHAPES[key]
    return {}


def _cases() -> list:
    cases = []
    for arg in all_arguments():
        if arg.key in NOT_PATHS or not looks_like_a_path(arg):
            continue
        kinds, argv = _spec(arg)
        makers = {what: make for kind in kinds.split() for what, make in KINDS[kind].items()}
        makers.update(_shapes(arg))
        if arg.name in READS_PIPES:
            del makers[FIFO]
        for what, make in makers.items():
            case = Case(arg.cli, arg.key, arg.names, what, tuple(argv), make)
            if case.id in NOT_HOSTILE:
                continue
            marks = [pytest.mark.xfail(strict=True, reason=XFAIL[case.id])] if case.id in XFAIL else []
            cases.append(pytest.param(case, id=case.id, marks=marks))
    return cases


CASES = _cases()


# --- the sweep -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def good(tmp_path_factory) -> Path:
    """Valid inputs for the arguments not under test: a Hugging Face directory with its tokenizer,
    text, metrics files, and a real checkpoint of trainer.llm."""
    from trainer.hf_tiny import write_tiny

    root = tmp_path_factory.mktemp("good")
    write_tiny(root / "hf")
    (root / "text").mkdir()
    (root / "text" / "a.txt").write_text("The cluster trains language models.\n" * 20)
    step = {"step": 1, "loss": 2.0, "images_per_sec": 10.0, "kind": "step"}
    epochs = [{"kind": "epoch", "step": n, "epoch": n, "loss": 1.0, "top1": 0.5, "top5": 0.9, "images_per_sec": 10.0 * w,
               "epoch_time_s": 5.0, "world_size": w} for n in (1, 2) for w in (1,)]
    (root / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [step, *epochs]))
    (root / "runs").mkdir()
    for world in (1, 2):
        lines = [dict(e, world_size=world, images_per_sec=10.0 * world) for e in epochs]
        (root / "runs" / f"n{world}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    made = run_in_process(entry("trainer.llm"), [*LLM, "--checkpoint-dir", str(root / "checkpoints"),
                                                 "--sync-checkpoint", "--checkpoint-every", "1"], DEADLINE_S * 3)
    assert made.code == 0, made.stderr + made.escaped
    return root


@pytest.fixture
def sweep_env(tmp_path, monkeypatch):
    """Offline and isolated: AWS and the hub on a dead loopback port, no kubeconfig, a scratch HOME
    and working directory (so relative defaults land in the case's folder)."""
    for key in [k for k in os.environ if k.startswith(("AWS_", "KUBECONFIG", "HF_", "TORCHELASTIC_"))]:
        monkeypatch.delenv(key)
    home = tmp_path / "home"
    home.mkdir()
    for key, value in {"HOME": str(home), "AWS_ENDPOINT_URL": "http://127.0.0.1:9", "AWS_EC2_METADATA_DISABLED": "true",
                       "AWS_CONFIG_FILE": str(home / "none"), "AWS_SHARED_CREDENTIALS_FILE": str(home / "none"),
                       "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
                       "AWS_DEFAULT_REGION": "us-east-1", "HF_TOKEN": "hf_sweep", "HF_ENDPOINT": "http://127.0.0.1:9",
                       "OPS_CHECKIP_URL": "http://127.0.0.1:9"}.items():
        monkeypatch.setenv(key, value)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "crashes").mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "crashes"))  # ops' crash reports, if any


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_path_is_one_line_naming_the_argument_and_exit_2(case, good, tmp_path, sweep_env):
    scratch = tmp_path / "case"
    scratch.mkdir()
    hostile = case.make(scratch)
    argv = [a.format(path=hostile, good=good, tmp=scratch) for a in case.argv]
    before, shared = tree(scratch), tree(good)
    as_a_user = UNENTERABLE in case.what or READ_ONLY in case.what
    with denied_as_a_user() if as_a_user else contextlib.nullcontext():
        outcome = run_in_process(entry(case.cli), argv, DEADLINE_S)
    shown = f"argv: {argv}\nexit {outcome.code}\nstderr:\n{outcome.stderr}{outcome.escaped}"
    assert not outcome.hung, f"no answer in {DEADLINE_S} s\n{shown}"
    assert not outcome.escaped and "Traceback" not in outcome.stderr, shown
    assert outcome.code == 2, shown
    assert len(outcome.lines) == 1, shown
    assert any(name in outcome.lines[0] for name in case.names), f"the line must name {case.names[0]}\n{shown}"
    if as_a_user and case.arg not in NOT_READ:
        assert re.search("permission denied|not writable by this user", outcome.lines[0], re.I), shown
    assert not new_files(before, tree(scratch)), f"left behind: {new_files(before, tree(scratch))}\n{shown}"
    assert tree(good) == shared


def test_every_path_argument_of_every_command_is_swept():
    """A new command or argument whose name looks like a path fails here until the tables above
    say what it is; a table entry for an argument that no longer exists fails too."""
    found = {a.key: a for a in all_arguments()}
    unlisted = []
    for key, arg in found.items():
        if key in NOT_PATHS or not looks_like_a_path(arg):
            continue
        try:
            _spec(arg)
        except KeyError:
            unlisted.append(key)
    assert not unlisted, f"say in TRAINER/OPS_KINDS (or NOT_PATHS) what these are: {unlisted}"
    stale = sorted(k for k in [*TRAINER, *NOT_PATHS] if k not in found)
    assert not stale, f"no such argument any more: {stale}"
    assert all(kind in KINDS for kinds, _ in TRAINER.values() for kind in kinds.split())


def test_every_runnable_module_is_swept_or_says_why_not():
    swept = {"ops", *TRAINER_CLIS}
    modules = set(modules_with_a_main())
    assert modules - swept - set(NOT_SWEPT) == set(), "a new command: add it to TRAINER_CLIS or NOT_SWEPT"
    assert set(NOT_SWEPT) <= modules and swept <= modules


def test_the_sweep_covers_each_kind_of_hostile_path():
    whats = {c.values[0].what for c in CASES}
    assert {"missing", "directory", "binary", "non-utf8", "a file", "under a file", "under /proc", UNENTERABLE,
            f"in an {UNENTERABLE} folder", FIFO, "a dangling symlink", READ_ONLY, f"in a {READ_ONLY} folder",
            "a file, a line break in its name"} <= whats
    assert len(CASES) > 100
