"""One module per kind of reference source: each reads its files into a ``ReferenceCurve``."""
