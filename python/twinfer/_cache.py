"""Where twinfer keeps exported models between processes."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir(*parts: str) -> Path:
    root = Path(os.environ.get("TWINFER_CACHE", Path.home() / ".cache" / "twinfer"))
    path = root.joinpath(*parts)
    path.mkdir(parents=True, exist_ok=True)
    return path
