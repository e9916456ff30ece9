"""Hostile input on the deploy side (issue 11): one `error:` line, exit 2, no traceback, nothing half-written,
and a second deploy keeps what the user edited. The full sweep is benchmarks/hostile/run_deploy.py."""
import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from session_cache import checkpoint as cached_checkpoint
from grpo_edge.errors import TargetError
from grpo_edge.targets import contract

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, cwd=None, timeout=600):
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "grpo_edge.cli.main"] + [str(a) for a in args], cwd=cwd, env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=timeout)


def assert_one_line_error(r, *words):
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    assert "Traceback" not in r.stderr
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("hostile")
    cp = cached_checkpoint("cartpole")
    r = cli("export", cp, "--out", d / "m.onnx")
    assert r.returncode == 0, r.stderr
    x = np.random.default_rng(0).standard_normal((64, 4)).astype(np.float32)
    x[5, 2] = np.inf
    np.save(str(d / "inf.npy"), x)
    return {"dir": d, "cp": cp, "onnx": d / "m.onnx", "inf": d / "inf.npy"}


def _cases(f, tmp):
    (tmp / "mine").mkdir()
    (tmp / "mine" / "runner.py").write_text("# my runner\n")
    (tmp / "afile").write_text("keep\n")
    cp, dep = f["cp"], ["deploy", "--checkpoint", f["cp"]]
    return [
        (dep + ["--target", "rpi4", "--out", tmp / "afile"], ("afile", "not a folder")),
        (dep + ["--target", "rpi4", "--out", tmp / "afile" / "sub"], ("afile",)),
        (dep + ["--target", "rpi4", "--out", tmp / "mine"], ("mine", "--force")),
        (dep + ["--target", "jetson-nano", "--out", tmp / "j", "--option", "workspace=1"], ("workspace", "workspace_mb")),
        (dep + ["--target", "rpi4", "--out", tmp / "r", "--option", "runs=[1"], ("runs", "YAML")),
        (dep + ["--target", "rpi4", "--out", tmp / "r", "--option", "runs"], ("key=value",)),
        (dep + ["--target", "rpi4", "--out", tmp / "r", "--activations", "int8"], ("esp32",)),
        (["deploy", "--checkpoint", cp], ("--target",)),
        (["deploy", "--target", "esp32", "--onnx", f["onnx"], "--out", tmp / "e"], ("--calibration",)),
        (["deploy", "--target", "rpi4", "--onnx", f["onnx"], "--calibration", f["inf"], "--out", tmp / "r"],
         ("inf.npy", "non-finite")),
        (["export", cp, "--opset", "5", "--out", tmp / "x.onnx"], ("--opset",)),
        (["export", cp, "--out", tmp / "mine"], ("mine",)),
        (["calibrate", cp, "--n", "0", "--out", tmp / "c.npz"], ("--n",)),
        (["eval", cp, "--n", "-1"], ("--n",)),
    ]


def test_hostile_cli_inputs_give_one_line(files, tmp_path):
    for args, words in _cases(files, tmp_path):
        before = sorted(p.name for p in tmp_path.rglob("*"))
        r = cli(*args)
        assert_one_line_error(r, *words)
        assert sorted(p.name for p in tmp_path.rglob("*")) == before, args     # nothing half-written
    assert (tmp_path / "mine" / "runner.py").read_text() == "# my runner\n"
    assert (tmp_path / "afile").read_text() == "keep\n"


def test_second_deploy_keeps_the_users_edit(files, tmp_path):
    out = tmp_path / "nano"
    args = ["deploy", "--target", "jetson-nano", "--checkpoint", files["cp"], "--out", out, "--option", "evaluate=false"]
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    manifest = contract.read_manifest(out)
    assert "build_engine.sh" in manifest and "deploy.json" in manifest
    assert stat.S_IMODE((out / "build_engine.sh").stat().st_mode) == 0o755
    assert all(f.stat().st_mode & stat.S_IROTH for f in out.iterdir())            # readable by others
    with open(str(out / "build_engine.sh"), "a") as fh:
        fh.write("# my trtexec flags\n")
    edited = (out / "build_engine.sh").read_text()
    r = cli(*args)
    assert r.returncode == 0, r.stderr
    assert (out / "build_engine.sh").read_text() == edited                         # the edit is kept
    assert (out / "build_engine.sh.new").is_file()
    assert "kept 1 file you edited" in r.stdout and "build_engine.sh" in r.stdout
    assert not list(tmp_path.glob(".nano.staging-*"))


def _fake_build(files):
    def build(target, checkpoint, onnx, out_dir, options):
        for rel, text in files.items():
            p = Path(out_dir) / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text)
        if "seed" in options:                      # the fake build fails when asked for a seed
            raise TargetError("failed in %s" % (Path(out_dir) / "x"))
        return None
    return build


def test_publish_rules(tmp_path):
    out = tmp_path / "d"
    gen1 = {"a.txt": "1", "sub/b.c": "1", "old.txt": "1", "run.sh": "#!/bin/sh\n"}
    contract.deploy_into_folder(_fake_build(gen1), "rpi4", out_dir=out)
    assert contract.read_manifest(out).keys() == set(gen1)
    assert stat.S_IMODE((out / "run.sh").stat().st_mode) == 0o755
    assert stat.S_IMODE((out / "a.txt").stat().st_mode) == 0o644
    (out / "sub" / "b.c").write_text("mine")
    (out / "notes.md").write_text("user file")
    contract.deploy_into_folder(_fake_build({"a.txt": "2", "sub/b.c": "2", "run.sh": "#!/bin/sh\n"}), "rpi4",
                                out_dir=out)
    assert (out / "a.txt").read_text() == "2"                      # unchanged generated file: replaced
    assert (out / "sub" / "b.c").read_text() == "mine"             # edited: kept
    assert (out / "sub" / "b.c.new").read_text() == "2"
    assert not (out / "old.txt").exists()                          # generated before, not now, unchanged: gone
    assert (out / "notes.md").read_text() == "user file"           # never ours: untouched
    with pytest.raises(TargetError, match="failed in x"):          # a failure publishes nothing
        contract.deploy_into_folder(_fake_build({"a.txt": "3"}), "rpi4", out_dir=out, options={"seed": 1})
    assert (out / "a.txt").read_text() == "2"
    assert not list(tmp_path.glob(".d.staging-*"))
    with pytest.raises(TargetError, match="unknown option"):
        contract.deploy_into_folder(_fake_build({}), "jetson-nano", out_dir=tmp_path / "j", options={"nope": 1})


def test_foreign_folder_needs_force(tmp_path):
    out = tmp_path / "d"
    out.mkdir()
    (out / "a.txt").write_text("theirs")
    with pytest.raises(TargetError, match="--force"):
        contract.deploy_into_folder(_fake_build({"a.txt": "ours"}), "rpi4", out_dir=out)
    contract.deploy_into_folder(_fake_build({"a.txt": "ours"}), "rpi4", out_dir=out, force=True)
    assert (out / "a.txt").read_text() == "ours"


def _tmpfs(path, size):
    path.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=%s" % size, "tmpfs", str(path)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if r.returncode != 0:
        pytest.skip("cannot mount a small tmpfs here (needs root): %s" % r.stderr.decode().strip())


def test_full_disk_and_read_only(files, tmp_path):
    full = tmp_path / "full"
    _tmpfs(full, "8k")
    try:
        r = cli("export", files["cp"], "--out", full / "x.onnx")
        assert_one_line_error(r, "x.onnx", "disk full")
        assert list(full.iterdir()) == []
        r = cli("deploy", "--target", "jetson-nano", "--checkpoint", files["cp"], "--out", full / "d",
                "--option", "evaluate=false")
        assert_one_line_error(r, "disk full")
        assert list(full.iterdir()) == []
        subprocess.run(["mount", "-o", "remount,ro", str(full)], check=True)
        r = cli("export", files["cp"], "--out", full / "x.onnx")
        assert_one_line_error(r, "x.onnx", "Read-only")
    finally:
        subprocess.run(["umount", "-l", str(full)])


def test_listings_fit_80_columns_when_piped():
    for cmd, names in ((["tasks"], ["zh-en-numbers", "tiny-transformer"]), (["targets"], ["jetson-orin-nano"])):
        r = cli(*cmd)
        assert r.returncode == 0, r.stderr
        lines = r.stdout.splitlines()
        assert max(len(line) for line in lines) <= 80, r.stdout
        for n in names:
            assert any(n in line.split() for line in lines), (n, r.stdout)
    rows = json.loads(cli("tasks", "--json").stdout)
    assert {"task", "kind", "model", "metric"} <= set(rows[0])


def test_atomic_writes_are_readable(tmp_path):
    from grpo_edge.report import atomic_write_text
    atomic_write_text(tmp_path / "a.json", "{}")
    assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) & 0o044 == 0o044
