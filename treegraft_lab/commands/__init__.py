"""Subcommands of the `treegraft-lab` CLI, one module each."""
