"""magneton.tracer"""
