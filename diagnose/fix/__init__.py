"""What to change: libcst edits of the user's code (edits), the efficient side's arguments
carried over to the wasteful call (ports), and the fix chosen for each finding (plan)."""
