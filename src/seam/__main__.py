"""``python -m seam``: the command line of seam.cli."""

import sys

from seam.cli import main

sys.exit(main())
