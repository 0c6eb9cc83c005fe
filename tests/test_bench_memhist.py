"""bench/scripts/memhist.py's replay of an allocator trace: the peak, and what the window allocated alive at it."""

from bench.scripts.memhist import replay, segments

MB = 2**20


def _ev(action, addr, size, filename="/site/transformers/models/x.py", line=1):
    return {"action": action, "addr": addr, "size": size, "frames": [{"filename": filename, "line": line, "name": "f"}]}


def test_peak_holds_the_blocks_alive_then_not_the_ones_freed_before():
    trace = [
        _ev("alloc", 1, 10 * MB, line=10),
        _ev("free_requested", 1, 10 * MB),
        _ev("free_completed", 1, 10 * MB),
        _ev("alloc", 2, 30 * MB, filename="/site/torchao/float8/a.py", line=5),
        _ev("alloc", 3, 5 * MB, line=20),  # peak: base 100 + 30 + 5
        _ev("free_requested", 99, 40 * MB),  # allocated before the window: lowers the base
        _ev("alloc", 4, 20 * MB, line=30),  # 95 + 20 = 115 < 135
    ]
    out = replay(trace, 100 * MB)
    assert out["window"]["peak_mb"] == 135.0
    assert out["window"]["freed_allocated_before_mb"] == 40.0
    assert out["window"]["window_blocks_at_peak_mb"] == 35.0
    by_file = {r["where"]: r["mb"] for r in out["at_peak"]["by_file"]}
    assert by_file == {"transformers/models/x.py": 5.0, "torchao/float8/a.py": 30.0}
    assert out["at_peak"]["by_frame"][0]["mb"] == 30.0


def test_library_frame_skips_torch_internals_to_the_model_line():
    frames = [
        {"filename": "/site/torch/_tensor.py", "line": 3, "name": "__mul__"},
        {"filename": "/site/peft/tuners/lora/layer.py", "line": 77, "name": "forward"},
    ]
    out = replay([{"action": "alloc", "addr": 1, "size": MB, "frames": frames}], 0)
    assert out["at_peak"]["by_frame"][0]["where"].endswith("torch/_tensor.py:3 __mul__")
    assert out["at_peak"]["by_library_frame"][0]["where"] == "tuners/lora/layer.py:77 forward"


def test_segments_count_holes_by_size_class_and_who_grew_the_pool():
    def seg(total, blocks, filename):
        return {"total_size": total, "allocated_size": sum(s for s, st in blocks if st == "active_allocated"),
                "blocks": [{"size": s, "state": st} for s, st in blocks],
                "frames": [{"filename": filename, "line": 1, "name": "f"}]}  # fmt: skip

    segs = [
        seg(1 * MB, [(MB // 2, "active_allocated"), (MB // 2, "inactive")], "/site/peft/a.py"),
        seg(100 * MB, [(60 * MB, "active_allocated"), (30 * MB, "inactive"), (10 * MB, "inactive")], "/site/train.py"),
        seg(3 * 2**30, [(3 * 2**30, "active_allocated")], "/site/transformers/b.py"),
    ]
    trace = [
        _ev("segment_alloc", 1, 100 * MB, filename="/site/liger_kernel/loss.py"),
        _ev("segment_alloc", 2, 50 * MB, filename="/site/liger_kernel/loss.py"),
        _ev("segment_free", 2, 50 * MB),
    ]
    out = segments(segs, trace)
    by = {r["class"]: r for r in out["by_size"]}
    assert by["20-200 MB"]["holes_mb"] == 40.0 and by["20-200 MB"]["largest_hole_mb"] == 30.0
    assert by["<=2 MB (small pool)"]["holes_mb"] == 0.5
    assert by[">2 GB"]["holes_mb"] == 0.0 and by[">2 GB"]["allocated_mb"] == 3072.0
    assert out["largest"][0]["mb"] == 3072.0
    assert out["grown_in_window"] == [{"where": "site/liger_kernel/loss.py:1 f", "mb": 150.0, "segments": 2}]
    assert out["released_in_window"] == {"mb": 50.0, "segments": 1}
