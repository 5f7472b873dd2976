"""``python -m tools.cli``: the same as ``opdebug``."""

import gc
import sys

from . import main

code = main()
# the process ends next: the interpreter's last collections over the whole heap (0.3-0.4 s) are
# skipped - the command's files are written and closed by now (main() called in-process keeps its GC)
gc.freeze()
sys.exit(code)
