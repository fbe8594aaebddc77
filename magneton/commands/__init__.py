"""One module per `magneton` subcommand; see magneton/cli.py for the contract."""
