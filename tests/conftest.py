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


# The Flower deployment test waits mostly on Flower's own polling and process start-ups:
# when it is selected with other tests, start its run with the session so the waiting
# overlaps them; the test collects the result. Its processes are killed when it ends.
DEPLOYMENT_TEST = "test_flower.py::test_real_deployment_with_a_node_killed_mid_round"


def pytest_collection_modifyitems(session, config, items):
    if len(items) > 1 and any(item.nodeid.endswith(DEPLOYMENT_TEST) for item in items):
        # Collect its result last, after the other tests have overlapped its waiting.
        items.sort(key=lambda item: item.nodeid.endswith(DEPLOYMENT_TEST))
        import tempfile

        from flower_helpers import DeploymentRun

        config.reshuffle_deployment_dir = tempfile.TemporaryDirectory(prefix="reshuffle-deploy-")
        config.reshuffle_deployment = DeploymentRun(config.reshuffle_deployment_dir.name).start()


def pytest_unconfigure(config):
    run = getattr(config, "reshuffle_deployment", None)
    if run is not None:
        run.result(timeout=900)  # its processes are killed when its scenario ends
        config.reshuffle_deployment_dir.cleanup()
