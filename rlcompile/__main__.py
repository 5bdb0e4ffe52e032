"""Allow ``python -m rlcompile``."""

import sys

from rlcompile.cli import main

sys.exit(main())
