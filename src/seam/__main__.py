"""``python -m seam``: the command line of seam.cli."""

import sys

from seam.cli import main

if __name__ == "__main__":  # not when a spawned process (multiprocessing) re-imports the main module
    sys.exit(main())
