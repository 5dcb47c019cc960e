"""Write schemas/ from the pydantic models; `--check` exits 1 listing stale files.

Usage: .venv/bin/python scripts/generate_schemas.py [--check]
"""

from __future__ import annotations

import sys
from pathlib import Path

from minruntime.events.schemas import main

if __name__ == "__main__":
    schemas = Path(__file__).resolve().parents[1] / "schemas"
    raise SystemExit(main(["--out", str(schemas), *sys.argv[1:]]))
