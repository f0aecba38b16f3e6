"""``python -m lionfactory`` and the ``lionfactory`` console script (see `lionfactory._cli`)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

__all__ = ["main"]


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``lionfactory`` command line and return its exit status."""
    from lionfactory._cli import main as run

    return run(argv)


if __name__ == "__main__":
    sys.exit(main())
