"""``python -m crashlens`` runs the command-line interface."""

import sys

from crashlens.cli import main

sys.exit(main())
