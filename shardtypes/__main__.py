"""``python -m shardtypes``: the ``shardtypes`` command (``shardtypes.tools.cli``)."""

import sys

from .tools.cli import EXIT_BROKEN_PIPE as EXIT_BROKEN_PIPE, main as main

__all__ = ["main", "EXIT_BROKEN_PIPE"]

if __name__ == "__main__":
    sys.exit(main())
