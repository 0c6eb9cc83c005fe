"""The bench scripts' packing (bench/scripts/common.py): full blocks of exactly seq_len tokens whose seq_lengths mark
every example piece, which TRL's padding-free collator turns into position_ids restarting per example."""

from __future__ import annotations

import pytest

from bench.scripts.common import ScriptError, pack_blocks, whole_steps


def test_blocks_are_full_and_seq_lengths_mark_example_pieces():
    examples = [([1] * 3, [-100, 1, 1]), ([2] * 5, [2] * 5), ([3] * 4, [3] * 4), ([4] * 2, [4] * 2)]
    got = pack_blocks(examples, 4)
    assert got["input_ids"] == [[1, 1, 1, 2], [2, 2, 2, 2], [3, 3, 3, 3]]  # the 2-token tail is dropped
    assert got["labels"][0] == [-100, 1, 1, 2]
    assert got["seq_lengths"] == [[3, 1], [4], [4]]  # example 2 crosses a block boundary and is split there
    assert all(sum(s) == 4 for s in got["seq_lengths"])


def test_position_ids_restart_at_every_example_piece():
    from trl.trainer.sft_trainer import DataCollatorForLanguageModeling

    got = pack_blocks([([5] * 3, [5] * 3), ([6] * 6, [6] * 6)], 4)
    rows = [{"input_ids": i, "labels": y, "seq_lengths": s} for i, y, s in zip(*got.values(), strict=True)]
    batch = DataCollatorForLanguageModeling(pad_token_id=0, padding_free=True)(rows)
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 0, 1, 2, 3]]  # one flattened row per micro-batch
    assert batch["labels"].tolist()[0][3] == -100 and batch["labels"].tolist()[0][4] == -100  # no cross-example target


def test_too_little_data_is_a_user_error():
    with pytest.raises(ScriptError, match="fewer than one --seq-len 64 block"):
        pack_blocks([([1] * 10, [1] * 10)], 64)
    with pytest.raises(ScriptError, match="fewer than one optimizer step of 8"):
        whole_steps(7, 8, 64)
    assert whole_steps(17, 8, 64) == 16
