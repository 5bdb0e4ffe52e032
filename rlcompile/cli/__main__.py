import sys

from rlcompile.cli.app import main

sys.exit(main())
