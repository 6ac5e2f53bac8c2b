"""``int8conf faults``: the fault classes and what each one does to a
kernel's declared epilogue.

``int8conf faults [--kernel NAME | --contract C] [--json]`` prints, for the
declared contract of ``--kernel`` (default ``cpu``) or ``--contract``
(``cutlass``, ``triton`` or ``<scale_order>/<bias_point>``), the declared
epilogue and, per fault that applies to the kernel's operands, the faulty
formula with and without bias (F1-F5), the operand change (F6-F9) or the
narrowed FP8 accumulator (F10, e4m3 kernels), from ``faults.describe``. Use the ids or names
with ``int8conf check --inject`` / ``pytest --inject``.
"""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from conformance.kernels.registry import get_kernel
from reference.command_line import make_console
from reference.errors import ContractError, Int8confError


def register(subparsers) -> None:
    """Add the ``faults`` subcommand."""
    p = subparsers.add_parser(
        "faults",
        help="list the fault classes and what each does to a declared epilogue",
        description=__doc__.split("\n\n")[1],
    )
    g = p.add_mutually_exclusive_group()
    g.add_argument(
        "--kernel", default=None, metavar="NAME", help="take the declared contract of this kernel (default: cpu)"
    )
    g.add_argument(
        "--contract", default=None, metavar="C", help="a contract: cutlass, triton or <scale_order>/<bias_point>"
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Print the table (or JSON); 0. Bad kernel / contract: Int8confError (exit 2)."""
    from conformance.kernels.loader import parse_contract
    from faults.describe import declared_formula, fault_rows

    operands = "int8"
    if args.contract is not None:
        try:
            contract, label = parse_contract(args.contract), f"contract {args.contract}"
        except ContractError as e:
            raise Int8confError(f"--contract: {e}") from None
    else:
        spec = get_kernel(args.kernel or "cpu")
        contract, label, operands = spec.contract, f"kernel {spec.name}", spec.operands
    rows = fault_rows(contract, operands)
    if args.json:
        print(
            json.dumps(
                {
                    "contract": contract.to_dict(),
                    "declared": {
                        "no_bias": declared_formula(contract, False),
                        "with_bias": declared_formula(contract, True),
                    },
                    "faults": rows,
                },
                indent=2,
            )
        )
        return 0
    t = Table(
        title=f"faults for {label} ({contract.label()}): declared "
        f"{declared_formula(contract, False)} / {declared_formula(contract, True)}"
    )
    for col in ("id", "name", "family", "no bias", "with bias"):
        t.add_column(col, overflow="fold")
    for r in rows:
        same = r["with_bias"] == r["no_bias"]
        t.add_row(r["id"], r["name"], r["family"], r["no_bias"], "(same)" if same else r["with_bias"])
    con = make_console()
    con.print(t)
    con.print(
        "x = float32(acc), rne/rtz = rounding to the output dtype, r16 = 16-bit "
        "intermediate, b = bias; details: faults/README.md",
        markup=False,
    )
    return 0
