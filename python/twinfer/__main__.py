"""The twinfer command line (also `python -m twinfer`); the commands live in twinfer.cli."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
