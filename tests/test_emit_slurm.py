"""The SLURM batch script: valid bash, #SBATCH header sbatch can read, one launcher per node with the node's own
rank, and no way for a hostile value (model name, path, host name, train.py argument) to run code."""

from __future__ import annotations

import os
import shlex
import stat
import subprocess

import pytest
from plan_factory import replace, variants

from generator.emit import render, train_args
from generator.emit.command import DATA_ARGS
from generator.emit.slurm import job_name, render_slurm

PLAN = variants()["multi_node_hsdp"]
HOSTILE = ["my model", 'it\'s "quoted"', "$(touch PWNED)", "`touch PWNED`", "a;touch PWNED", "new\nline $HOME"]

SRUN = """#!/bin/bash
# stub: drop srun's own options, run the step once per node with that node's SLURM_NODEID
while [[ "$1" == --* ]]; do shift; done
for node in 0 1; do SLURM_NODEID=$node "$@" || exit $?; done
"""
SCONTROL = """#!/bin/bash
[[ "$1 $2" == "show hostnames" && "$3" == "$SLURM_JOB_NODELIST" ]] || exit 9
printf '%s\\n' "$STUB_HEAD_HOST" node2
"""
ACCELERATE = """#!/bin/bash
# stub: record argv (NUL-separated), the exported device order and whether SIGUSR1 is ignored (SigIgn bit 10)
out="$STUB_OUT/node$SLURM_NODEID"
printf '%s\\0' "$@" > "$out.args"
printf '%s' "$CUDA_DEVICE_ORDER" > "$out.order"
grep SigIgn /proc/$$/status | awk '{print $2}' > "$out.sigign"
"""


def _stubs(tmp_path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, text in [("srun", SRUN), ("scontrol", SCONTROL), ("accelerate", ACCELERATE)]:
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(stat.S_IRWXU)
    return bin_dir


def _run(tmp_path, script: str, head_host: str = "node1") -> subprocess.CompletedProcess:
    path = tmp_path / "job.sh"
    path.write_text(script)
    env = {
        "PATH": f"{_stubs(tmp_path)}:{os.environ['PATH']}",
        "SLURM_JOB_NODELIST": "node[1-2]",
        "SLURM_NODEID": "0",  # the batch shell's own, which must not leak into the per-node ranks
        "STUB_OUT": str(tmp_path),
        "STUB_HEAD_HOST": head_host,
    }
    return subprocess.run(["bash", str(path)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)


def _argv(tmp_path, node: int) -> list[str]:
    return (tmp_path / f"node{node}.args").read_text().split("\0")[:-1]


def test_script_is_valid_bash_with_sbatch_header_first():
    script = render_slurm(PLAN, "configs/mn.yaml")
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    lines = script.splitlines()
    first_command = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    sbatch = [line for line in lines if line.startswith("#SBATCH")]
    assert all(lines.index(line) < first_command for line in sbatch)
    assert "#SBATCH --nodes=2" in sbatch and "#SBATCH --signal=USR1@120" in sbatch
    assert "#SBATCH --gpus-per-node=8" in sbatch and "#SBATCH --ntasks-per-node=1" in sbatch


def test_one_launcher_per_node_with_its_own_rank(tmp_path):
    result = _run(tmp_path, render_slurm(PLAN, "configs/mn.yaml", ["--max-steps", "3"]))
    assert result.returncode == 0, result.stderr
    for node in (0, 1):
        argv = _argv(tmp_path, node)
        assert argv[:3] == ["launch", "--machine_rank", str(node)]
        assert argv[argv.index("--config_file") + 1] == "configs/mn.yaml"
        assert argv[argv.index("--main_process_ip") + 1] == "node1"
        assert argv[argv.index("--rdzv_backend") + 1] == "static" and "--same_network" in argv
        # --dataset at train.py's default is written out; --max-steps is the caller's, not repeated
        data = ["--dataset", "recipes/data/synthetic_instruct.jsonl"]
        assert argv[argv.index("train.py") + 1 :] == train_args(PLAN) + data + ["--max-steps", "3"]
        assert (tmp_path / f"node{node}.order").read_text() == "PCI_BUS_ID"
        assert int((tmp_path / f"node{node}.sigign").read_text(), 16) & (1 << 9), "launcher must ignore SIGUSR1"


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_values_are_data_not_code(tmp_path, hostile):
    plan = replace(PLAN, model=replace(PLAN.model, name=hostile))
    config = f"cfg {hostile}.yaml"
    script = render_slurm(plan, config, ["--output-dir", hostile])
    subprocess.run(["bash", "-n"], input=script, text=True, check=True)
    result = _run(tmp_path, script, head_host=hostile.replace("\n", " "))
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "PWNED").exists()
    argv = _argv(tmp_path, 1)
    assert argv[argv.index("--config_file") + 1] == config
    assert argv[argv.index("--main_process_ip") + 1] == hostile.replace("\n", " ")
    assert argv[argv.index("--model") + 1] == hostile
    assert argv[-2:] == ["--output-dir", hostile]
    name = job_name(plan)
    assert name and all(c.isalnum() or c in "._-" for c in name)


def test_render_includes_the_script_for_multi_machine_plans_only():
    em = render(PLAN, "configs/mn.yaml")
    assert em.files["configs/mn.slurm.sh"] == render_slurm(PLAN, "configs/mn.yaml")
    with pytest.raises(ValueError, match="multi-machine"):
        render_slurm(variants()["fsdp"], "c.yaml")


def test_script_runs_what_the_printed_command_runs(tmp_path):
    """Apart from the per-node rank and head host, the script launches exactly the printed command."""
    em = render(PLAN, "configs/mn.yaml")
    assert _run(tmp_path, em.files["configs/mn.slurm.sh"]).returncode == 0
    printed = shlex.split(em.launch_command)[2:]  # drop CUDA_DEVICE_ORDER=... and "accelerate"
    i = printed.index("--machine_rank")
    del printed[i : i + 2]
    ran = _argv(tmp_path, 0)
    del ran[1:3]  # --machine_rank 0
    assert ran[-4:] == list(DATA_ARGS)  # what it trains on and for how long, written out (issue 19 item 14)
    del ran[-4:]
    j = ran.index("--main_process_ip")
    del ran[j : j + 2]
    assert ran == printed
