"""Target of the ``torch_dynamo_backends`` entry point (pyproject.toml), which lets
``torch.compile(model, backend="twinfer")`` find the backend without ``import
twinfer.torch``. Kept outside twinfer.torch: importing that package registers the
backend itself, and torch registers the entry point's function right after
loading it, which must not collide."""

from __future__ import annotations


def twinfer_backend(gm, example_inputs, **options):
    from twinfer.torch._backend import twinfer_backend as backend

    return backend(gm, example_inputs, **options)
