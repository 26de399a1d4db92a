"""``python -m syncprims``: the command line."""

import sys

from syncprims.cli import main

if __name__ == "__main__":
    sys.exit(main())
