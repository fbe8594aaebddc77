"""Reading the user's source with libcst (index) and walking back through it to the line
a user can change: from a key variable (dataflow), an operand property (argflow), or a
setting made before the measured region (setupflow)."""
