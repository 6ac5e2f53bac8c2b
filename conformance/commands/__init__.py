"""Subcommands of the ``int8conf`` CLI (``conformance.cli``).

Each module here defines ``register(subparsers) -> None``: it adds its
argparse subparser(s) and sets ``func`` (namespace -> exit code) with
``set_defaults``. ``conformance.cli`` imports every module of this package
(``pkgutil``) and calls ``register``; modules whose name starts with ``_``
are skipped.
"""
