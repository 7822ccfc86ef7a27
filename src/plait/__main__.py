"""``python -m plait``: the same as the ``plait`` command."""

import sys

from plait.cli import main

if __name__ == "__main__":
    sys.exit(main())
