import os

import numpy as np
import pytest


def _gpu_present() -> bool:
    try:
        import twinfer

        return twinfer.cuda_available()
    except Exception:  # the import error itself is reported by the tests that use twinfer
        return False


def pytest_collection_modifyitems(config, items):
    if _gpu_present():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng(request):
    # Fresh data every run, but reproducible from the printed seed on failure.
    seed = int(os.environ.get("TWINFER_TEST_SEED", np.random.SeedSequence().entropy % (2**31)))
    request.node.user_properties.append(("seed", seed))
    print(f"seed={seed}")
    return np.random.default_rng(seed)
