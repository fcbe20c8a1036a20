"""The `pybroker` command."""
