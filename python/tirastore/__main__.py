"""``python -m tirastore``: the ``tirastore`` command (tirastore.cli)."""

import sys

from tirastore.cli import main

sys.exit(main())
