"""magneton.knowledge"""
