"""Multi-rank jobs: one report over all ranks (ranks; magneton/render/ranks.py prints it), which library call issued
each collective (collectives), and the rank-by-rank diff of two jobs (jobdiff)."""
