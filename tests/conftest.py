from pathlib import Path

import pytest

from reshuffle.crypto.group import get_group

# Both backends are installed by `make test` (the 'charm' extra): a missing one fails.
BACKENDS = ["ristretto255", "secp256k1"]


@pytest.fixture(params=BACKENDS, scope="session")
def group(request):
    return get_group(request.param)


@pytest.fixture(scope="session")
def ristretto():
    return get_group("ristretto255")


@pytest.fixture(scope="session")
def dataset_dir():
    """``dataset_dir(name)``: the idx dataset's folder at the default path (data/<name>), or skip.

    Development machines and CI get it from scripts/setup.sh (links), users from
    `reshuffle data fetch`; the test skips only when the files are genuinely absent.
    """
    from reshuffle.clients.data import default_data_root
    from reshuffle.clients.fetch import source

    def get(name: str):
        folder = default_data_root() / name
        if not all((folder / f.name).is_file() for f in source(name).files):
            pytest.skip(f"{name} not in {folder} (scripts/setup.sh --data or `reshuffle data fetch {name}`)")
        return folder

    return get


@pytest.fixture(scope="session")
def digits():
    from reshuffle.clients import load_dataset

    return load_dataset("digits")


# A Flower app folder for `flwr run` (it imports the example), not a test module.
collect_ignore = ["flower_probe_app"]


# The local simulations wait mostly on Flower's own polling and process start-ups: when
# they are selected, start their runs with the session (a background thread) so the
# waiting overlaps the other tests; the tests collect the results, last. Under
# pytest-xdist (`make test` runs two workers) every worker collects the same items: the
# first to claim the runs starts them, and the runs write their outcomes to files in one
# folder that the controller shares with every worker, so whichever worker runs a test
# reads them. Their processes are killed when their scenarios end.
LOCAL_SIMULATION_TESTS = "test_flower_sim.py::"


def pytest_configure(config):
    import os

    # `make soak` selects these, `make test` leaves them out.
    config.addinivalue_line("markers", "soak: the fault soak on a real Flower deployment (minutes; `make soak`)")

    # Flower posts a telemetry event from every process it starts (and waits for it on exit): no test
    # reaches the network.
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    if not hasattr(config, "workerinput"):  # the xdist controller, or a run without xdist
        import tempfile

        if config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None):
            # One thread per worker (the workers inherit this environment): on a busy
            # 2-core machine, 90 logreg training steps took 6.4 s with torch's 2 threads
            # and 0.07-0.10 s with 1 (load average 7-9).
            for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
                os.environ.setdefault(var, "1")

        config.reshuffle_background_dir = tempfile.TemporaryDirectory(prefix="reshuffle-flower-",
                                                                       ignore_cleanup_errors=True)


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):  # pytest-xdist, on the controller: one folder for every worker
    node.workerinput["reshuffle_background_dir"] = node.config.reshuffle_background_dir.name


def _claim(folder: Path) -> bool:
    """True for exactly one process among those sharing ``folder``'s parent."""
    import os

    folder.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.close(os.open(folder.with_suffix(".claim"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


@pytest.hookimpl(trylast=True)  # after -k / -m deselection: never start a run nobody will collect
def pytest_collection_modifyitems(session, config, items):
    if not any(LOCAL_SIMULATION_TESTS in item.nodeid for item in items) or config.option.collectonly:
        return
    items.sort(key=lambda item: LOCAL_SIMULATION_TESTS in item.nodeid)  # their results are collected last
    from flower_helpers import LocalSimulationRuns

    root = Path(config.workerinput["reshuffle_background_dir"] if hasattr(config, "workerinput")
                else config.reshuffle_background_dir.name)
    config.reshuffle_background = root
    config.reshuffle_started = []
    folder = root / LocalSimulationRuns.__name__
    if _claim(folder):
        config.reshuffle_started.append(LocalSimulationRuns(folder).start())


def pytest_unconfigure(config):
    for run in getattr(config, "reshuffle_started", []):
        run.join(timeout=2 * run.RUN_TIMEOUT + 60)  # its processes are killed when its scenario ends
    if hasattr(config, "reshuffle_background_dir"):
        config.reshuffle_background_dir.cleanup()
