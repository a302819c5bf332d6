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


# The shared datasets sit beside the repository (../shared/data), never inside it.
SHARED_DATA = __import__("pathlib").Path(__file__).resolve().parents[2] / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data():
    if not (SHARED_DATA / "mnist").is_dir():
        pytest.skip(f"shared datasets not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def digits():
    from reshuffle.clients import load_dataset

    return load_dataset("digits")


# A Flower app folder for `flwr run` (it imports the example), not a test module.
collect_ignore = ["flower_probe_app"]
