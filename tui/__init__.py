"""magneton.tui"""
