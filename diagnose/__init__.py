"""magneton.diagnose"""
