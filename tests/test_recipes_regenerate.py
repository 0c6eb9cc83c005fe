"""recipes/ is exactly what the generator writes today (byte for byte), and each recipe says what the issue asks:
hardware, method, why, predicted numbers, the plan and launch commands; the multi-node one ships a SLURM script and a
security section."""

from __future__ import annotations

from pathlib import Path

import yaml

from docsgen.readme_plans import plan_commands
from docsgen.recipes import RECIPES, RECIPES_DIR, regenerate

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = ROOT / RECIPES_DIR
HINT = "run: .venv/bin/python -m docsgen.recipes"


def committed_files() -> dict[str, bytes]:
    """Everything under recipes/ except recipes/data/ (train.py's sample data) and recipes/trl-sft/ (a hand-written
    script recipe; tests/test_readme_paths.py reruns its plan commands), neither generated here."""
    return {
        str(p.relative_to(COMMITTED)): p.read_bytes()
        for p in COMMITTED.rglob("*")
        if p.is_file() and p.relative_to(COMMITTED).parts[0] not in ("data", "trl-sft") and "__pycache__" not in p.parts
    }


def test_committed_recipes_match_a_fresh_regeneration(tmp_path):
    written = regenerate(tmp_path)
    fresh = {str(p.relative_to(tmp_path)): p.read_bytes() for p in written}
    committed = committed_files()
    assert sorted(fresh) == sorted(committed), HINT
    stale = [name for name in fresh if fresh[name] != committed[name]]
    assert not stale, f"{stale} differ; {HINT}"


def readme(name: str) -> str:
    return (COMMITTED / name / "README.md").read_text()


def test_the_scenarios_the_issue_asks_for_exist_with_the_expected_strategy():
    def config(name: str) -> dict:
        return yaml.safe_load((COMMITTED / name / "config.yaml").read_text())

    names = {r.name for r in RECIPES}
    assert {"hgx-h200-8-full", "h200-nvl-8-island4-full", "h200-sxm-2-full", "pcie-l40s-8-full"} <= names
    assert {"rtx4090-1gpu-lora", "rtx4090-1gpu-qlora", "multinode-hgx-h200-8x2-hsdp"} <= names
    # NVL: inside one NVLink group of four (GPUs 0-3 or 4-7 are the groups of the reference machine)
    assert str(config("h200-nvl-8-island4-full")["gpu_ids"]) in ("0,1,2,3", "4,5,6,7")
    for name in ("rtx4090-1gpu-lora", "rtx4090-1gpu-qlora"):
        assert config(name)["num_processes"] == 1
    multi = config("multinode-hgx-h200-8x2-hsdp")
    assert (multi["num_machines"], multi["num_processes"], multi["main_process_ip"]) == (2, 16, "10.0.0.1")
    assert multi["distributed_type"] == "FSDP" and multi["parallelism_config"]["parallelism_config_dp_shard_size"] == 8


def test_every_recipe_readme_states_hardware_method_numbers_and_commands():
    for r in RECIPES:
        text = readme(r.name)
        for needle in ("- Hardware:", "- Model and method:", "## Why this strategy for this wiring", "(predicted)"):
            assert needle in text, (r.name, needle)
        assert f"python -m generator plan {' '.join(r.args)} " in text  # then bf16 where it names no precision
        assert f"--output {RECIPES_DIR}/{r.name}/config.yaml --force" in text
        assert "--precision" in text.split("python -m generator plan", 1)[1].splitlines()[0]
        assert f"accelerate launch --config_file {RECIPES_DIR}/{r.name}/config.yaml" in text
        assert "CUDA_DEVICE_ORDER=PCI_BUS_ID accelerate launch" in text
        # every number is labelled: "measured" appears only with its machine, date and file
        for line in text.splitlines():
            if "measured (" in line:
                assert "bench/results/" in line and "2026-" in line, line


def test_index_maps_what_you_have_to_every_recipe():
    index = (COMMITTED / "README.md").read_text()
    for r in RECIPES:
        assert f"| {r.have} | [`{r.name}`]({r.name}/README.md) |" in index


def test_multinode_recipe_has_slurm_script_and_security_section():
    script = (COMMITTED / "multinode-hgx-h200-8x2-hsdp" / "config.slurm.sh").read_text()
    assert "#SBATCH --signal=USR1@120" in script and "#SBATCH --nodes=2" in script
    assert '--machine_rank "$SLURM_NODEID"' in script
    text = readme("multinode-hgx-h200-8x2-hsdp")
    assert "## Security" in text and "no authentication" in text and "29500/tcp" in text
    assert "sbatch recipes/multinode-hgx-h200-8x2-hsdp/config.slurm.sh" in text
    assert "--machine_rank 0" in text and "--machine_rank 1" in text
    # the fabric table is the estimator's: HSDP on one NDR port, something else where nodes are as fast as NVLink
    assert "| ib-ndr | 40 GB/s | hsdp |" in text


def test_a_readmes_own_plan_commands_are_found_as_the_readme_test_reads_them():
    text = (
        "```sh\nCUDA_VISIBLE_DEVICES=0 python -m generator plan --model m \\\n  --output recipes/x/a.yaml --force\n"
        "python -m generator plan --model m  # no --output: prints only\n```\n"
        "```text\npython -m generator plan --output recipes/x/b.yaml\n```\n"
        "```bash\npython -m generator topo --output t.txt\n```\n"
    )
    assert plan_commands(text) == [
        ["python", "-m", "generator", "plan", "--model", "m", "--output", "recipes/x/a.yaml", "--force"]
    ]
    trl = plan_commands((ROOT / "recipes" / "trl-sft" / "README.md").read_text())
    assert {w[w.index("--output") + 1] for w in trl} == {
        "recipes/trl-sft/config-lora.yaml",
        "recipes/trl-sft/config-full.yaml",
    }
