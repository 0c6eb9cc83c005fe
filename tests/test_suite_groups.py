"""The suite's own scheduling (tests/conftest.py): under `make test` (two xdist workers, --dist loadgroup) a test that
launches a process group is routed to the one worker that runs them one at a time. pytest 9.2 with xdist 3.8 stopped
routing silently (pytest-xdist issue 1386: the group rides on the node id, which 9.2 no longer lets xdist rewrite),
so two launches shared two cores four ways; this fails if a version change does that again."""

import pytest


@pytest.fixture(autouse=True)
def _under_loadgroup(request):
    if not getattr(request.config.option, "loadgroup", False):  # set on each xdist worker under --dist loadgroup
        pytest.skip("routing applies under `make test` (-n 2 --dist loadgroup) only")


@pytest.mark.slow
def test_a_launch_test_is_routed_to_the_launch_worker(request):
    assert request.node.nodeid.endswith("@launches"), request.node.nodeid


@pytest.mark.slow(process_group=False)
def test_a_single_process_test_is_free_to_run_beside_them(request):
    assert "@" not in request.node.nodeid.rsplit("::", 1)[-1], request.node.nodeid
