"""``python -m groupcoord.cli``: the same as the ``groupcoord`` console script."""

import sys

from groupcoord.cli.main import main

sys.exit(main())
