"""``python -m tools.cli``: the same as ``opdebug``."""

import sys

from . import main

sys.exit(main())
