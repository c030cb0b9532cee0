"""Views of runs: the live terminal panel, the HTML report and the run comparison."""
