"""``python -m headrace ...``: the same commands as the ``headrace`` script."""

import sys

from headrace.cli import main

sys.exit(main())
