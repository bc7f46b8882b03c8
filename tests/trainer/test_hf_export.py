"""`python -m trainer.hf export`: the export carries the tokenizer of the Hugging Face directory the
run started from and its bos/eos ids, so transformers loads it with its tokenizer; a run that did
not start from one says so in one line; a bad checkpoint record or output path is one line and
exit 2, with nothing written."""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers", reason="transformers is a pinned test dependency")

from crafted import CreatesMarker  # noqa: E402
from trainer.cli import run_main  # noqa: E402
from trainer.hf import load_hf_weights, main  # noqa: E402
from trainer.hf_config import TOKENIZER_LIMIT_BYTES, from_hf_config, read_config  # noqa: E402
from trainer.hf_tiny import write_tiny  # noqa: E402
from trainer.model import Transformer  # noqa: E402
from trainer.torchvision_compat import prepare  # noqa: E402
from trainer_procs import REPO, job_env  # noqa: E402

prepare()  # transformers' Auto classes import torchvision when it is installed
CPU = type("Runtime", (), {"device": torch.device("cpu"), "is_main": False})()


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory):
    """A tiny Hugging Face directory, and a checkpoint of ours that started from it."""
    import torch.distributed.checkpoint as dcp
    root = tmp_path_factory.mktemp("hf-export")
    source, ckpt = root / "hf", root / "ckpt"
    write_tiny(source)
    model = Transformer(from_hf_config(read_config(source)))
    load_hf_weights(model, source, CPU)
    step = ckpt / "step-00000002"
    dcp.save({"app": {"model": model.state_dict()}}, checkpoint_id=str(step), no_dist=True)
    (step / "COMPLETE").write_text("2\n")
    (ckpt / "model.json").write_text(json.dumps({"model": model.cfg.to_dict(), "init_from_hf": str(source)}))
    return source, ckpt


def run_cli(argv, capsys) -> tuple[int, str, str]:
    with pytest.raises(SystemExit) as exit_:
        run_main(lambda: main(argv))
    out, err = capsys.readouterr()
    return exit_.value.code, out, err


def copy_checkpoint(ckpt: Path, tmp_path: Path, record=None) -> Path:
    copy = tmp_path / "ckpt"
    shutil.copytree(ckpt, copy)
    if record is not None:
        (copy / "model.json").write_text(record if isinstance(record, str) else json.dumps(record))
    return copy


def assert_loads_with_the_sources_tokenizer(out: Path, source: Path):
    tok, reference = (transformers.AutoTokenizer.from_pretrained(str(d)) for d in (out, source))
    text = "Checkpoints are written to FSx"
    assert tok(text)["input_ids"] == reference(text)["input_ids"]
    config = json.loads((out / "config.json").read_text())
    generation = transformers.GenerationConfig.from_pretrained(str(out))
    for kind in ("bos", "eos"):
        expected = reference.convert_tokens_to_ids(getattr(reference, f"{kind}_token"))
        assert getattr(tok, f"{kind}_token_id") == expected
        assert config[f"{kind}_token_id"] == expected and getattr(generation, f"{kind}_token_id") == expected
    model = transformers.AutoModelForCausalLM.from_pretrained(str(out))
    assert (model.config.bos_token_id, model.config.eos_token_id) == (config["bos_token_id"], config["eos_token_id"])


def test_the_export_loads_in_transformers_with_the_tokenizer_the_run_started_from(run_dirs, tmp_path, capsys):
    source, ckpt = run_dirs
    code, out, err = run_cli(["export", "--checkpoint", str(ckpt), "--out", str(tmp_path / "out"), "--dtype", "fp32"],
                             capsys)
    assert (code, err) == (0, "")
    assert_loads_with_the_sources_tokenizer(tmp_path / "out", source)


def test_ids_missing_from_the_sources_config_come_from_its_tokenizer(run_dirs, tmp_path, capsys):
    source, ckpt = run_dirs
    bare = tmp_path / "hf"
    shutil.copytree(source, bare)
    config = json.loads((bare / "config.json").read_text())
    for key in ("bos_token_id", "eos_token_id"):
        config.pop(key)
    (bare / "config.json").write_text(json.dumps(config))
    record = json.loads((ckpt / "model.json").read_text()) | {"init_from_hf": str(bare)}
    code, _, err = run_cli(["export", "--checkpoint", str(copy_checkpoint(ckpt, tmp_path, record)),
                            "--out", str(tmp_path / "out")], capsys)
    assert (code, err) == (0, "")
    assert_loads_with_the_sources_tokenizer(tmp_path / "out", source)


def test_a_run_not_started_from_hugging_face_says_so_in_one_line_and_exports_the_weights(run_dirs, tmp_path, capsys):
    source, ckpt = run_dirs
    record = {"model": json.loads((ckpt / "model.json").read_text())["model"], "init_from_hf": None}
    scratch = copy_checkpoint(ckpt, tmp_path, record)
    code, out, err = run_cli(["export", "--checkpoint", str(scratch), "--out", str(tmp_path / "out")], capsys)
    assert code == 0 and out.startswith("Exported")
    assert err == ("note: the run did not start from a Hugging Face directory (model.json has no init_from_hf); "
                   "exported without a tokenizer; give --tokenizer DIR (a Hugging Face directory) to add one\n")
    assert not (tmp_path / "out" / "tokenizer.json").exists()
    assert "bos_token_id" not in json.loads((tmp_path / "out" / "config.json").read_text())
    transformers.AutoModelForCausalLM.from_pretrained(str(tmp_path / "out"))
    capsys.readouterr()  # transformers' own progress bar
    # --tokenizer supplies what the record lacks.
    code, _, err = run_cli(["export", "--checkpoint", str(scratch), "--out", str(tmp_path / "with"),
                            "--tokenizer", str(source)], capsys)
    assert (code, err) == (0, "")
    assert_loads_with_the_sources_tokenizer(tmp_path / "with", source)


def _record(ckpt: Path, **model_changes) -> dict:
    record = json.loads((ckpt / "model.json").read_text())
    record["model"].update(model_changes)
    return record


@pytest.mark.parametrize("record, message", [
    ("[1, 2]", "must hold a JSON object, got list"),
    ("{not json", "is not valid JSON"),
    ('{"model": [64]}', "'model' must be an object, got list"),
    ('{"model": {}}', "model.dim must be int, got None"),
    ("dim-as-text", "model.dim must be int, got '64'"),
    ("tie-as-int", "model.tie_embeddings must be bool, got 1"),
    ("zero-heads", "model.n_heads must be at least 1, got 0"),
    ("source-as-number", "'init_from_hf' must be a path, got int"),
])
def test_a_model_json_of_the_wrong_shape_is_one_line_and_exit_2(run_dirs, tmp_path, capsys, record, message):
    _, ckpt = run_dirs
    record = {"dim-as-text": lambda: _record(ckpt, dim="64"), "tie-as-int": lambda: _record(ckpt, tie_embeddings=1),
              "zero-heads": lambda: _record(ckpt, n_heads=0),
              "source-as-number": lambda: {**json.loads((ckpt / "model.json").read_text()), "init_from_hf": 5},
              }.get(record, lambda: record)()
    bad = copy_checkpoint(ckpt, tmp_path, record)
    code, out, err = run_cli(["export", "--checkpoint", str(bad), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and out == ""
    assert err.startswith(f"error: --checkpoint: {bad / 'model.json'}") and message in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()


def test_an_output_that_cannot_be_created_is_one_line_and_exit_2(run_dirs, tmp_path, capsys):
    _, ckpt = run_dirs
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for out, message in ((blocker / "out", "--out: cannot create"), (blocker, "--out: .* exists and is not a folder")):
        code, _, err = run_cli(["export", "--checkpoint", str(ckpt), "--out", str(out)], capsys)
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith("error: --out: ") and __import__("re").search(message, err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]


def test_an_output_folder_this_user_may_enter_but_not_list_is_one_line_naming_out(run_dirs, tmp_path, capsys):
    """Checking that --out is empty, Path.iterdir raised its PermissionError: a traceback and exit 1."""
    from cli_sweep import denied_as_a_user

    _, ckpt = run_dirs
    out = tmp_path / "out"
    out.mkdir(mode=0o300)
    with denied_as_a_user():
        code, _, err = run_cli(["export", "--checkpoint", str(ckpt), "--out", str(out)], capsys)
    assert (code, err) == (2, f"error: --out: cannot list {out} (Permission denied)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging folder beside it


def test_a_tokenizer_that_is_not_a_directory_is_one_line_and_exit_2(run_dirs, tmp_path, capsys):
    source, ckpt = run_dirs
    code, _, err = run_cli(["export", "--checkpoint", str(ckpt), "--out", str(tmp_path / "out"),
                            "--tokenizer", str(source / "tokenizer.json")], capsys)
    assert code == 2 and err.startswith(f"error: --tokenizer: {source / 'tokenizer.json'} is not a directory")
    assert not (tmp_path / "out").exists()


def test_a_huge_tokenizer_json_is_refused_at_a_bound_not_read_whole(run_dirs, tmp_path, capsys):
    """Its ids are looked up in the tokenizer when config.json lacks them: tokenizers'
    Tokenizer.from_file reads the whole file, and a 50 GB one (sparse here) asks for 50 GB."""
    source, ckpt = run_dirs
    bare = tmp_path / "hf"
    shutil.copytree(source, bare)
    config = json.loads((bare / "config.json").read_text())
    config.pop("eos_token_id")
    (bare / "config.json").write_text(json.dumps(config))
    with open(bare / "tokenizer.json", "wb") as f:
        f.truncate(50 << 30)
    code, _, err = run_cli(["export", "--checkpoint", str(ckpt), "--out", str(tmp_path / "out"),
                            "--tokenizer", str(bare)], capsys)
    assert (code, err) == (2, f"error: --tokenizer: {bare / 'tokenizer.json'} is larger than "
                              f"{TOKENIZER_LIMIT_BYTES:,} bytes\n")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_an_export_stopped_by_a_signal_removes_its_staging_folder_and_says_so_in_one_line(run_dirs, tmp_path, sig,
                                                                                          code):
    """SIGTERM (a deleted pod, `timeout`) ended the export at once and left its staging folder of
    part of the shards beside --out; Ctrl-C cleaned up behind a KeyboardInterrupt traceback."""
    from trainer_procs import preempt

    _, ckpt = run_dirs
    out = tmp_path / "out"
    rc, output = preempt([sys.executable, str(Path(__file__).with_name("export_held.py")), "export", "--checkpoint",
                          str(ckpt), "--out", str(out)],
                         after=r"^held after writing .*model-00001-of-00001\.safetensors$", timeout=30, sig=sig)
    assert "Traceback" not in output, output[-3000:]
    assert (rc, output.splitlines()[-1]) == (
        code, f"error: stopped by {sig.name} before it finished; nothing was written to {out}")
    assert list(tmp_path.iterdir()) == []


def test_a_signal_once_the_export_is_in_place_leaves_it_and_reports_success(run_dirs, tmp_path,
                                                                           sigterm_once_renamed_onto, capsys):
    """A signal just after the final rename raised Stopped: exit 143 and 'nothing was written to OUT'
    beside a complete OUT."""
    _, ckpt = run_dirs
    out = tmp_path / "out"
    sigterm_once_renamed_onto(out)
    code, stdout, _ = run_cli(["export", "--checkpoint", str(ckpt), "--out", str(out)], capsys)
    assert (code, stdout) == (0, f"Exported {ckpt / 'step-00000002'} to {out} (bf16)\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"] and (out / "config.json").is_file()


def test_a_tokenizer_whose_ids_pass_the_models_vocabulary_is_one_line_and_exit_2(run_dirs, tmp_path, capsys):
    """A sparse tokenizer.json (its ids have gaps) holds fewer tokens than the model's vocabulary but
    ids past it: the export was written, and failed in transformers with an IndexError at its first
    use. Only the special ids were compared with the vocabulary."""
    source, ckpt = run_dirs
    sparse = tmp_path / "hf"
    shutil.copytree(source, sparse)
    tokenizer = json.loads((sparse / "tokenizer.json").read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab.update({name: i + 2000 for name, i in vocab.items() if i >= 2})  # <s> and </s> stay 0 and 1
    (sparse / "tokenizer.json").write_text(json.dumps(tokenizer))
    top = max(vocab.values())
    assert len(vocab) < 1024 <= top  # the tiny model's vocabulary
    code, _, err = run_cli(["export", "--checkpoint", str(ckpt), "--out", str(tmp_path / "out"),
                            "--tokenizer", str(sparse)], capsys)
    assert (code, err) == (2, f"error: --tokenizer: {sparse / 'tokenizer.json'}: its token ids go up to {top}, "
                              "outside the model's vocabulary of 1024\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hf"]


@pytest.mark.parametrize("damage", ["truncated-data", "no-metadata", "crafted-metadata"])
def test_a_damaged_checkpoint_is_one_line_and_leaves_no_output(run_dirs, tmp_path, capsys, damage):
    _, ckpt = run_dirs
    damaged = copy_checkpoint(ckpt, tmp_path)
    if damage == "no-metadata":
        (damaged / "step-00000002" / ".metadata").unlink()
    if damage == "crafted-metadata":  # a pickle that would run code (trainer/safe_load.py)
        (damaged / "step-00000002" / ".metadata").write_bytes(pickle.dumps(CreatesMarker(tmp_path / "marker")))
    for data in (damaged / "step-00000002").glob("*.distcp") if damage == "truncated-data" else ():
        data.write_bytes(data.read_bytes()[:100])
    code, _, err = run_cli(["export", "--checkpoint", str(damaged), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and err.startswith(f"error: --checkpoint: {damaged / 'step-00000002'} cannot be read")
    assert err.count("\n") == 1
    if damage == "crafted-metadata":
        assert "unsafe checkpoint" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no staging folder, no marker


def test_a_checkpoint_whose_metadata_is_a_named_pipe_is_one_line_not_waited_on(run_dirs, tmp_path):
    # Opened to read, the pipe waited for a writer for ever: the export hung without a word.
    from cli_sweep import entry, run_in_process

    _, ckpt = run_dirs
    damaged = copy_checkpoint(ckpt, tmp_path)
    metadata = damaged / "step-00000002" / ".metadata"
    metadata.unlink()
    os.mkfifo(metadata)
    outcome = run_in_process(entry("trainer.hf"), ["export", "--checkpoint", str(damaged), "--out",
                                                   str(tmp_path / "out")], timeout_s=20)
    assert not outcome.hung, "no answer in 20 s"
    assert (outcome.code, outcome.lines) == (2, [f"error: --checkpoint: {damaged / 'step-00000002'} cannot be read "
                                                 f"(PathProblem: {metadata} is a named pipe, expected a regular file)"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_verify_accepts_the_export_and_answers_a_broken_one_in_one_line(run_dirs, tmp_path, capsys):
    source, ckpt = run_dirs
    out = tmp_path / "out"
    assert run_cli(["export", "--checkpoint", str(ckpt), "--out", str(out)], capsys)[0] == 0
    code, stdout, _ = run_cli(["verify", str(out)], capsys)
    assert code == 0 and "loads in transformers: LlamaForCausalLM" in stdout
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps(config | {"eos_token_id": config["eos_token_id"] + 1}))
    code, _, err = run_cli(["verify", str(out)], capsys)
    assert (code, err.splitlines()[-1]) == (2, f"error: DIRECTORY: {out}/config.json has eos_token_id "
                                               f"{config['eos_token_id'] + 1}, its tokenizer's eos token is "
                                               f"{config['eos_token_id']}")
    for shard in out.glob("*.safetensors"):
        shard.write_bytes(b"\xff" * 64)
    code, _, err = run_cli(["verify", str(out)], capsys)
    assert code == 2 and err.startswith(f"error: DIRECTORY: {out} does not load and run in transformers (")
    assert err.count("\n") == 1


def test_verify_refuses_a_weights_file_that_is_a_named_pipe_in_one_line_not_waited_on(tmp_path):
    """transformers (safetensors) opened it with open(), which waits for the pipe's writer for ever.
    In a process of its own: open() in Rust retries after a signal, so no deadline here could end it."""
    from safetensors.torch import load_file

    out = tmp_path / "hf"
    write_tiny(out)
    shard = out / "model-00001-of-00001.safetensors"
    names = load_file(out / "model.safetensors")
    (out / "model.safetensors").unlink()
    (out / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {n: shard.name for n in names}}))
    os.mkfifo(shard)
    p = subprocess.run([sys.executable, "-m", "trainer.hf", "verify", str(out)], cwd=REPO, env=job_env(),
                       capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stderr.splitlines()[-1:]) == (
        2, [f"error: DIRECTORY: {shard} is a named pipe, expected a regular file"])


@pytest.mark.parametrize("carrier", ["config.json", "tokenizer_config.json"])
def test_verify_never_runs_code_a_directory_names_even_when_stdin_says_yes(carrier, tmp_path, capsys, monkeypatch):
    """An `auto_map` names a Python file in the directory for transformers to import. Left to
    decide, transformers asks on stdin whether to run it (dynamic_module_utils.resolve_trust_remote_code),
    so a "y" there, or a person in a hurry, ran the file. Our exports carry no code: verify refuses it."""
    out = tmp_path / "hf"
    write_tiny(out)
    marker = tmp_path / "marker"
    (out / "custom.py").write_text(f"open({str(marker)!r}, 'w').close()\n"
                                   "from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast\n"
                                   "class CustomConfig(LlamaConfig):\n    model_type = 'custom'\n"
                                   "class CustomForCausalLM(LlamaForCausalLM):\n    config_class = CustomConfig\n"
                                   "class CustomTokenizer(PreTrainedTokenizerFast):\n    pass\n")
    record = json.loads((out / carrier).read_text())
    if carrier == "config.json":
        record |= {"model_type": "custom", "architectures": ["CustomForCausalLM"],
                   "auto_map": {"AutoConfig": "custom.CustomConfig", "AutoModelForCausalLM": "custom.CustomForCausalLM"}}
    else:
        record |= {"tokenizer_class": "CustomTokenizer", "auto_map": {"AutoTokenizer": ["custom.CustomTokenizer", None]}}
    (out / carrier).write_text(json.dumps(record))
    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    code, stdout, err = run_cli(["verify", str(out)], capsys)
    assert not marker.exists(), "the directory's code ran"
    assert code == 2 and stdout == "", stdout  # no question asked
    lines = [line for line in err.split("\n") if line.strip() and "\r" not in line]  # not the weights' progress bar
    assert len(lines) == 1 and lines[0].startswith(f"error: DIRECTORY: {out} does not load and run in transformers (")


@pytest.mark.parametrize("changes, message", [
    ({"dim": 2**20, "ffn_dim": 2**20}, "{record}: model.dim 1048576 does not fit the checkpoint: "
     "tok_embeddings.weight in {step} has shape (1024, 64), model.json makes it (1024, 1048576)"),
    ({"ffn_dim": 2**30}, "{record}: model.ffn_dim 1073741824 does not fit the checkpoint: "
     "layers.0.feed_forward.w1.weight in {step} has shape (192, 64), model.json makes it (1073741824, 64)"),
    ({"n_layers": 2**30}, "{record}: model.n_layers is 1073741824 but {step} holds no "
     "layers.1073741823.attention_norm.weight"),
    # The metadata claims the same sizes as model.json: the data files do not hold them.
    ({"dim": 2**20, "metadata too": True}, "{step} cannot be read (its data files hold"),
])
def test_a_model_json_claiming_sizes_the_checkpoint_does_not_hold_is_one_line_before_any_allocation(
        run_dirs, tmp_path, capsys, changes, message):
    """Before, export allocated model.json's shapes first: a hand-edited dim of 2^20 ended in
    'DefaultCPUAllocator: can't allocate memory' (exit 1), a claim just under the RAM in the OOM
    killer."""
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from config.models import ModelConfig
    from trainer.hf import _shapes
    from trainer.safe_load import SafeFileSystemReader
    _, ckpt = run_dirs
    metadata_too = changes.pop("metadata too", False)
    bad = copy_checkpoint(ckpt, tmp_path, _record(ckpt, **changes))
    step = bad / "step-00000002"
    if metadata_too:
        metadata = SafeFileSystemReader(str(step)).read_metadata()
        claimed = _shapes(ModelConfig.from_dict(_record(ckpt, **changes)["model"]))
        for name, entry in metadata.state_dict_metadata.items():
            if isinstance(entry, TensorStorageMetadata) and name.removeprefix("app.model.") in claimed:
                entry.size = torch.Size(claimed[name.removeprefix("app.model.")])
        (step / ".metadata").write_bytes(pickle.dumps(metadata))
    code, out, err = run_cli(["export", "--checkpoint", str(bad), "--out", str(tmp_path / "out")], capsys)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith("error: --checkpoint: " + message.format(record=bad / "model.json", step=step)), err
    assert not (tmp_path / "out").exists()
