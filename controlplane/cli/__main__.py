"""``python -m controlplane.cli``: the ``spotplane`` command."""

import sys

from controlplane.cli.main import main

sys.exit(main())
