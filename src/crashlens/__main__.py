"""``python -m crashlens`` runs the command-line interface."""

from crashlens.cli import main

main()
