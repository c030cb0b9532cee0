"""`msmon validate`: the checks that run before a single training step is spent."""
