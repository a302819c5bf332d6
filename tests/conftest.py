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


# The Flower deployment test and the local simulations wait mostly on Flower's own
# polling and process start-ups: when they are selected with other tests, start their
# runs with the session (a background thread each) so the waiting overlaps the other
# tests; the tests collect the results, last. The deployment run (about 4 minutes here,
# most of it in protocol phases waiting on SuperNode polls) bounds the suite's time.
# Their processes are killed when their scenarios end.
DEPLOYMENT_TEST = "test_flower.py::test_real_deployment_with_a_node_killed_mid_round"
LOCAL_SIMULATION_TESTS = "test_flower_sim.py::"


@pytest.hookimpl(trylast=True)  # after -k / -m deselection: never start a run nobody will collect
def pytest_collection_modifyitems(session, config, items):
    deployment = any(item.nodeid.endswith(DEPLOYMENT_TEST) for item in items)
    simulation = any(LOCAL_SIMULATION_TESTS in item.nodeid for item in items)
    waiting = sum(item.nodeid.endswith(DEPLOYMENT_TEST) or LOCAL_SIMULATION_TESTS in item.nodeid for item in items)
    if waiting == 0 or waiting == len(items) or config.option.collectonly:
        return
    # The simulations end first, the deployment run last.
    items.sort(key=lambda item: (item.nodeid.endswith(DEPLOYMENT_TEST), LOCAL_SIMULATION_TESTS in item.nodeid))
    import tempfile

    from flower_helpers import DeploymentRun, LocalSimulationRuns

    config.reshuffle_background_dir = tempfile.TemporaryDirectory(prefix="reshuffle-flower-")
    root = Path(config.reshuffle_background_dir.name)
    config.reshuffle_deployment = DeploymentRun(root / "deploy").start() if deployment else None
    if simulation:
        config.reshuffle_local_sims = LocalSimulationRuns(root / "sim").start()


def pytest_unconfigure(config):
    run = getattr(config, "reshuffle_deployment", None)
    if run is not None:
        run.result(timeout=900)  # its processes are killed when its scenario ends
    sims = getattr(config, "reshuffle_local_sims", None)
    if sims is not None:
        sims.result("project", timeout=1200)
    if getattr(config, "reshuffle_background_dir", None) is not None:
        config.reshuffle_background_dir.cleanup()
