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
