"""``python -m speclab.cli``: the same as the ``speclab`` command."""

import sys

from speclab.cli import main

sys.exit(main())
