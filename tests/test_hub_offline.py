"""No network: a hub id that is not cached fails at once in one line, in the generator and in train.py, instead of
huggingface_hub retrying for tens of seconds (issue 19, item 6). The hub is never contacted here: the connect probe
is made to fail and any real download attempt is recorded as a failure of the test."""

from __future__ import annotations

import argparse
import time

import pytest

from generator.cli import main
from generator.errors import UserError
from generator.model import hub


@pytest.fixture
def no_network(monkeypatch):
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)

    def refuse(address, timeout=None):
        raise OSError(101, "Network is unreachable")

    monkeypatch.setattr(hub.socket, "create_connection", refuse)


def test_offline_reason_names_the_env_var_or_the_host(monkeypatch, no_network):
    assert "huggingface.co:443" in hub.hub_offline_reason()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert hub.hub_offline_reason() == "HF_HUB_OFFLINE=1 is set"


def test_plan_with_an_uncached_hub_id_fails_at_once_without_asking_the_hub(monkeypatch, capsys, no_network):
    import huggingface_hub

    asked = []
    real = huggingface_hub.hf_hub_download

    def download(repo_id, filename, local_files_only=False, **kw):
        if not local_files_only:
            asked.append(repo_id)
            raise AssertionError("the hub was asked although it is unreachable")
        return real(repo_id, filename, local_files_only=True, **kw)

    monkeypatch.setattr(huggingface_hub, "hf_hub_download", download)
    start = time.perf_counter()
    assert main(["plan", "--model", "someorg/x", "--machine", "h200-sxm-2"]) == 2
    err = capsys.readouterr().err
    assert time.perf_counter() - start < 5 and not asked
    assert err.count("\n") == 1 and "offline" in err and "huggingface.co:443" in err


def test_train_model_loading_fails_at_once_without_asking_the_hub(monkeypatch, no_network):
    import transformers

    from training.model import load_config_and_tokenizer

    asked = []
    real = transformers.AutoConfig.from_pretrained

    def from_pretrained(name, local_files_only=False, **kw):
        if not local_files_only:
            asked.append(name)
            raise AssertionError("the hub was asked although it is unreachable")
        return real(name, local_files_only=True, **kw)

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", from_pretrained)
    with pytest.raises(UserError, match=r"not a local directory or in the Hugging Face cache.*offline") as err:
        load_config_and_tokenizer(argparse.Namespace(model="someorg/x", seq_len=128))
    assert not asked and "\n" not in str(err.value)
