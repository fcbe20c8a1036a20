import pytest
from _parity import load_twins


@pytest.fixture(scope="module")
def twins(request):
    """(native module, pure module) for the test module's TWIN name."""
    return load_twins(request.module.TWIN)
