"""Repros: minimal torch programs that fail the way a diagnosed cause does (a closed loop).

- :mod:`.catalog`: the scripts in ``scripts/`` and their ``crashlens-repro:`` headers; rules name
  a repro with ``repro: <id>``.
- :mod:`.sandbox`: runs one script in its own process group with a timeout, an address-space
  limit, loopback networking and HOME/TMPDIR inside the run's directory; nothing outlives it.
- :mod:`.run`: :func:`~crashlens.repro.run.run_repro` runs a repro, diagnoses its logs with
  :func:`crashlens.analyze`, and says whether the top cause's class is the repro's class.
- :mod:`.cli`: ``crashlens repro list|show|run`` and ``analyze --repro``
  (:func:`~crashlens.repro.cli.run_for_report`).
- :mod:`.capture`: ``python -m crashlens.repro.capture`` rewrites ``fixtures/repro/<id>/``.

torch (and datasets) are optional: ``pip install 'crashlens[repro]'``. Nothing here imports
torch until a GPU repro has to check for CUDA.
"""
