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
