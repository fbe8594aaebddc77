"""Why a finding happened: where the two sides diverge (divergence), which condition or
setting made them (keyvar), the diagnosis of each finding (rootcause), and one group per
cause (grouping)."""
