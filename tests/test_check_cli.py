"""`python -m generator check` end to end: exit codes, --fix/--output/--force, --json, hostile input, no torch."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "configs"


def check(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "generator", "check", *args],
        cwd=ROOT,
        input=stdin,
        capture_output=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    ("name", "code"),
    [("fsdp2_clean.yaml", 0), ("fsdp1_keys_under_v2.yaml", 1), ("yaml11_booleans.yaml", 2)],
)
def test_exit_codes(name, code):
    r = check(str(FIXTURES / name), "--machine", "h200-sxm-2")
    assert r.returncode == code, r.stdout.decode() + r.stderr.decode()
    assert b"Traceback" not in r.stderr


def test_fix_writes_a_clean_config_and_refuses_to_overwrite(tmp_path):
    out = tmp_path / "fixed.yaml"
    r = check(str(FIXTURES / "fsdp1_sharding_strategy.yaml"), "--machine", "hgx-h200-8", "--fix", "--output", str(out))
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    fixed = yaml.safe_load(out.read_text())
    assert fixed["fsdp_config"]["fsdp_version"] == 2
    assert check(str(out), "--machine", "hgx-h200-8").returncode == 0
    before = out.read_text()
    again = check(str(FIXTURES / "yaml11_booleans.yaml"), "--fix", "--output", str(out))
    assert again.returncode == 2 and b"already exists" in again.stderr and out.read_text() == before
    forced = check(str(FIXTURES / "yaml11_booleans.yaml"), "--machine", "h200-sxm-2", "--fix", "--output", str(out),
                   "--force")  # fmt: skip
    assert forced.returncode == 0 and yaml.safe_load(out.read_text())["distributed_type"] == "NO"
    assert not [p for p in tmp_path.iterdir() if p.name != "fixed.yaml"]  # no temporary files left behind


def test_fix_needs_output():
    r = check(str(FIXTURES / "ddp_clean.yaml"), "--fix")
    assert r.returncode == 2 and b"--output" in r.stderr


def test_json_output():
    r = check(str(FIXTURES / "zero3_file_conflict.yaml"), "--machine", "h200-sxm-2", "--json")
    doc = json.loads(r.stdout)
    assert r.returncode == doc["exit_code"] == 2
    assert {"severity", "key", "problem", "fix", "rule", "fixable"} <= set(doc["findings"][0])


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        (b"\x00\x01\x02binary", b"binary"),
        (b"a: &a [1]\nb: *a\n", b"anchors"),
        (b"- 1\n- 2\n", b"expected a mapping"),
        (b"distributed_type: [\n", b"not valid YAML"),
        (b"a: " + b"[" * 5000 + b"]" * 5000, b"nests deeper"),
        (b"\xff\xfe bad utf8", b"UTF-8"),
        (b"", b"empty"),
    ],
)
def test_bad_input_is_one_clear_line(tmp_path, content, needle):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(content)
    r = check(str(bad))
    assert r.returncode == 2 and needle in r.stderr and b"Traceback" not in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1


def test_billion_laughs_is_refused_fast(tmp_path):
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    bomb = tmp_path / "bomb.yaml"
    bomb.write_text("\n".join(lines) + "\n")
    r = check(str(bomb))
    assert r.returncode == 2 and b"not allowed" in r.stderr


def test_huge_missing_and_directory_inputs(tmp_path):
    huge = tmp_path / "huge.yaml"
    huge.write_text("# " + "x" * (300 * 1024) + "\n")
    assert b"bytes; expected at most" in check(str(huge)).stderr
    assert b"does not exist" in check(str(tmp_path / "nope.yaml")).stderr
    assert b"is a directory" in check(str(tmp_path)).stderr


def test_stdin():
    r = check("-", "--machine", "h200-sxm-2", stdin=(FIXTURES / "ddp_clean.yaml").read_bytes())
    assert r.returncode == 0, r.stderr


def test_check_never_imports_torch_or_transformers():
    code = (
        "import sys; from generator.cli import main; "
        f"rc = main(['check', {str(FIXTURES / 'fsdp1_sharding_strategy.yaml')!r}, '--machine', 'hgx-h200-8', "
        "'--model', 'mistral-7b']); "
        "bad = [m for m in ('torch', 'transformers', 'accelerate') if m in sys.modules]; "
        "assert not bad, bad; print('rc', rc)"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, timeout=60)
    assert r.returncode == 0 and b"rc 1" in r.stdout, r.stderr.decode()


def test_exclude_flag_reaches_the_suggestion(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("distributed_type: MULTI_GPU\nnum_processes: 4\ngpu_ids: 0,1,4,5\n")
    out = tmp_path / "fixed.yaml"
    r = check(str(cfg), "--machine", "h200-nvl-8", "--exclude", "0", "--fix", "--output", str(out))
    assert r.returncode == 0, r.stdout.decode() + r.stderr.decode()
    assert yaml.safe_load(out.read_text())["gpu_ids"] == "4,5,6,7"
