"""One module per `prep` subcommand; each exposes `add_parser(subparsers)` and `run(args) -> int`."""
