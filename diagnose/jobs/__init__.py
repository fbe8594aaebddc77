"""Multi-rank jobs: one report over all ranks (ranks, rank_view), which library call issued
each collective (collectives), and the rank-by-rank diff of two jobs (jobdiff)."""
