"""Entry point for ``python -m msmon``."""

from msmon.cli.main import main

if __name__ == "__main__":
    main()
