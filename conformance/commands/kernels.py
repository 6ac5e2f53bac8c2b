"""``int8conf kernels``: every kernel int8conf knows -- built-ins, adapters for
the field's libraries (torchao, bitsandbytes, vLLM-family), registered and
entry-point kernels -- with availability here and the reason when not."""

from __future__ import annotations

import argparse
import json

from rich.table import Table

from conformance.kernels.registry import BUILTINS, builtin_available, get_kernel, list_kernels
from reference.command_line import make_console
from reference.errors import first_line


def register(subparsers) -> None:
    """Add the ``kernels`` subcommand."""
    p = subparsers.add_parser(
        "kernels",
        help="list the kernels int8conf can run, with availability",
        description="List built-in and adapted kernels: name, origin, devices, declared "
        "epilogue, availability on this machine (and why not).",
    )
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=run)


def kernel_rows() -> list[dict]:
    """One dict per known kernel: ``name, origin, devices, available, reason,
    contract, steps, version``."""
    from conformance.kernels import adapters
    from reference.contract import declared_to_dict

    rows = []
    for name in list_kernels():
        if name in BUILTINS:
            ok, why = builtin_available(name)
        else:
            ok, why = True, ""
        row = {
            "name": name,
            "origin": "builtin" if name in BUILTINS else "registered/entry-point",
            "available": bool(ok),
            "reason": why or "",
        }
        try:
            spec = get_kernel(name)
            row.update(
                devices=list(spec.devices),
                contract=spec.contract.label(),
                steps=declared_to_dict(spec.steps),
                version=spec.version,
            )
        except Exception as e:  # noqa: BLE001 -- one line per broken kernel
            row.update(available=False, reason=first_line(e, None) or repr(e))
        rows.append(row)
    import torch

    for name, info in adapters.ADAPTERS.items():
        ok, why = adapters.availability(name)
        if ok and "cpu" not in info.devices and not torch.cuda.is_available():
            ok, why = (
                False,
                (
                    f"{info.requires[0]} is installed, but this kernel runs on "
                    f"{'/'.join(info.devices)} only and torch.cuda.is_available() "
                    f"is False"
                ),
            )
        row = {
            "name": name,
            "origin": f"adapter ({info.requires[0]})",
            "available": ok,
            "reason": why,
            "devices": list(info.devices),
            "description": info.description,
        }
        if adapters.availability(name)[0]:
            spec = adapters.make_spec(name)
            row.update(contract=spec.contract.label(), steps=declared_to_dict(spec.steps), version=spec.version)
        rows.append(row)
    return rows


def run(args: argparse.Namespace) -> int:
    """Print the kernel list; exit 0."""
    rows = kernel_rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    t = Table(title="int8conf kernels")
    for c in ("name", "origin", "devices", "available", "declared epilogue / reason"):
        t.add_column(c)
    for r in rows:
        if r["available"]:
            st = r.get("steps")
            if st and "steps" in st:
                what = "; ".join(st["steps"])
            elif st:
                what = " | ".join(f"{k}: {'; '.join(v['steps'])}" for k, v in st.items())
            else:
                what = r.get("contract", "")
        else:
            what = r["reason"]
        t.add_row(r["name"], r["origin"], ",".join(r.get("devices", [])), "yes" if r["available"] else "no", what)
    make_console().print(t)
    return 0
