"""Matching and detection: pair the regions of two runs that compute the same values
(equivalence, match; pathmatch for traces without values), flag the pairs whose energies
differ (detect, interpreter), and re-measure them before reporting (confirm)."""
