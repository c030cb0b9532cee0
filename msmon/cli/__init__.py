"""The Typer command layer: one small module per command over the library core."""
