"""Repro scripts that really crash on CPU, and the sandbox + capture that record their logs."""
