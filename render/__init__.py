"""Presentation: turns the data model's results into text, tables, CSV and HTML for the CLI and the TUI; analysis code returns data only."""
