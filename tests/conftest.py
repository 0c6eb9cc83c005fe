"""Suite-wide isolation: no test may read or write the user's calibration cache (plan applies it when present) or its
meta counts, and every process a test launches starts with standard input, output and error open."""

import os

import pytest


def _reopen_closed_standard_fds() -> None:
    """CI runs the suite with standard input closed. Then the first pipe a test makes is fd 0, a launched process
    inherits no stdin, and the first socket it opens (a rendezvous store, say) becomes its fd 0, which its own workers
    inherit as theirs: the two-launcher loopback test hung that way in 2 of 3 runs with `<&-`. /dev/null fills the
    gap before anything opens a pipe."""
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
        except OSError:
            opened = os.open(os.devnull, mode)
            if opened != fd:  # a lower descriptor was closed too: it took that one
                os.dup2(opened, fd)
                os.close(opened)


_reopen_closed_standard_fds()


def _one_core_each() -> None:
    """Each xdist worker (and each process it launches) gets its share of the cores for torch's intra-op threads.
    Left at torch's default, two workers on a 2-core machine run four spinning OpenMP threads: a 64 x 128 x 256
    matmul took 0.44 ms with two threads beside a running suite, 0.19 with one (2026-12-05), and the CPU probe's test
    ran past its two minutes on CI."""
    workers = os.environ.get("PYTEST_XDIST_WORKER_COUNT")
    if not workers:
        return
    threads = str(max(1, (os.cpu_count() or 1) // int(workers)))
    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(name, threads)
    import sys

    if "torch" in sys.modules:  # a plugin imported it before this file: its pool is already sized
        sys.modules["torch"].set_num_threads(int(threads))


_one_core_each()


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the group marks to route each test
def pytest_collection_modifyitems(config, items):
    """`make test` runs the suite on two pytest-xdist workers (--dist loadgroup). Tests that launch process groups
    (marked slow: accelerate launch, torchrun, two ranks over gloo) all go to one worker, one at a time: two of them at
    once would share a 2-core machine's CPU four ways, and a launch without its own port takes torchrun's default.
    `slow(process_group=False)`: plain single-process runs (no rendezvous, no port), free to run beside them."""
    for item in items:
        mark = item.get_closest_marker("slow")
        if mark is not None and mark.kwargs.get("process_group", True):
            item.add_marker(pytest.mark.xdist_group("launches"))


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory):
    """Each worker gets its own cache home, but the meta device's counts in it (generator/model/meta_cache.py) are one
    directory the workers share: an entry is keyed by the config, the versions and the counting code and written
    atomically, so a count one worker made answers the other's (the cold counts of the bench models cost ~95 s of CPU
    and were made once a worker). It starts with the report's committed entries (bench/meta_seed.py), each read only
    where the counting code and versions are the ones that wrote it."""
    from bench import meta_seed

    old = os.environ.get("XDG_CACHE_HOME")
    home = tmp_path_factory.mktemp("xdg-cache")
    meta = home / "dist-config-generator" / "meta"
    if os.environ.get("PYTEST_XDIST_WORKER"):  # under xdist the base temp's parent is the run's, the same for all
        shared = tmp_path_factory.getbasetemp().parent / "meta-counts-shared"
        shared.mkdir(exist_ok=True)
        meta.parent.mkdir()
        meta.symlink_to(shared, target_is_directory=True)
    meta_seed.install(meta)
    os.environ["XDG_CACHE_HOME"] = str(home)
    yield
    if old is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = old
