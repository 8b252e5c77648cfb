import os

import numpy as np
import pytest


def _gpu_present() -> bool:
    try:
        import twinfer

        return twinfer.cuda_available()
    except Exception:  # the import error itself is reported by the tests that use twinfer
        return False


def _cuda_compiled() -> bool:
    try:
        from twinfer import _core

        return _core.build_info_cuda_compiled()
    except Exception:
        return False


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", default=False,
                     help="also run the tests marked slow (large models; their packages: pip install '.[test-slow]')")


def pytest_collection_modifyitems(config, items):
    # Slow tests are opted into, so the default run (CI's) stays within its time.
    if not (config.getoption("--run-slow") or os.environ.get("TWINFER_RUN_SLOW") == "1"):
        slow = pytest.mark.skip(reason="slow: run with --run-slow (or TWINFER_RUN_SLOW=1)")
        for item in items:
            if "slow" in item.keywords:
                item.add_marker(slow)
    if not _cuda_compiled():
        host_only = pytest.mark.skip(reason="this build has no CUDA backend (TWINFER_CUDA=OFF or no nvcc): the "
                                            "simulated device cannot place nodes as CUDA would (sim_coverage='cuda')")
        for item in items:
            if "cuda_build" in item.keywords:
                item.add_marker(host_only)
    if _gpu_present():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


# Model-level tests take the `device` fixture: every one runs on the CPU and on
# the simulated device (a GPU stand-in that checks stream order, copies and
# graph replay; twinfer.testing) in CI, and on CUDA where a GPU is present.
DEVICES = ["cpu", "sim", pytest.param("cuda", marks=pytest.mark.cuda)]

# The simulated device placing nodes as CUDA would (sim_coverage="cuda"): it
# reads the CUDA kernel registry, so it needs a build with the CUDA backend.
SIM_AS_CUDA = pytest.param("sim", marks=pytest.mark.cuda_build)


@pytest.fixture(params=DEVICES)
def device(request):
    return request.param


# Where a test checks what runs on the device, beside "cpu" and "sim": the
# simulated device placing nodes as CUDA would, under its own name (load_on
# maps it), so the two sims are separate parameters.
PLAN_DEVICES = ["cpu", "sim", pytest.param("sim-cuda", marks=pytest.mark.cuda_build),
                pytest.param("cuda", marks=pytest.mark.cuda)]


def load_on(model, device: str, **options):
    """twinfer.load on one of PLAN_DEVICES."""
    import twinfer

    if device == "sim-cuda":
        device, options["sim_coverage"] = "sim", "cuda"
    return twinfer.load(model, device=device, **options)


def rel_err(got, want) -> float:
    """||got - want|| / ||want|| in float64 (NaN positions must match to be finite)."""
    got = np.asarray(got, dtype=np.float64)
    want = np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        raise AssertionError(f"shape {got.shape} != {want.shape}")
    if not np.array_equal(np.isnan(got), np.isnan(want)):
        return float("inf")
    ok = ~np.isnan(want)
    return float(np.linalg.norm(got[ok] - want[ok]) / max(np.linalg.norm(want[ok]), 1e-30))


@pytest.fixture
def rng(request):
    # Fresh data every run, but reproducible from the printed seed on failure.
    seed = int(os.environ.get("TWINFER_TEST_SEED", np.random.SeedSequence().entropy % (2**31)))
    request.node.user_properties.append(("seed", seed))
    print(f"seed={seed}")
    return np.random.default_rng(seed)
