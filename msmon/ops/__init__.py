"""Operating runs: the board manager, config backups, the run table and cleaning."""
