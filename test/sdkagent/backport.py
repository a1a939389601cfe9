"""Syntax-only backports that let supervaizer 1.8.0 (requires-python >=3.12)
be imported by CPython 3.11, applied to the installed package in place.

Each backport names the installed file, the sha256 the file must have before
it is touched (the wheel's own file: any other content fails loudly, so a new
wheel cannot be patched by accident), and exact text replacements, each of
which must match the expected number of times. Nothing changes behaviour:
PEP 695 generics become a module-level TypeVar, and one PEP 701 f-string that
spans lines becomes the same expression on one line. After patching, every
module of the package must compile (python -m compileall), else exit 1.

Usage: python backport.py <site-packages directory>
"""

from __future__ import annotations

import compileall
import hashlib
import pathlib
import sys

CONTRACTS_TYPEVAR = (
    "\n\nContractModelT = TypeVar(\"ContractModelT\", bound=ContractModel)  "
    "# backport: PEP 695 generic\n\n\ndef _contract_list("
)

BACKPORTS = [
    {
        "file": "supervaizer/contracts.py",
        "sha256": "9098dea2f84c63d164fb84aee1a75a75ce4344192963cf2e5015d3ec3b63f764",
        "replace": [
            # (old, new, expected count)
            ("from typing import Any, Literal\n",
             "from typing import Any, Literal, TypeVar\n", 1),
            ("\n\ndef _contract_list[ContractModelT: ContractModel](",
             CONTRACTS_TYPEVAR, 1),
            ("def _contract_or_default[ContractModelT: ContractModel](",
             "def _contract_or_default(", 1),
            ("def _contract_or_none[ContractModelT: ContractModel](",
             "def _contract_or_none(", 1),
        ],
    },
    {
        "file": "supervaizer/server.py",
        "sha256": "83f521b46009a4bfe178b798237d025d5e1610f3a95be5b6110371889a1fd130",
        "replace": [
            (
                '            f"[Server launch] Public key - decode:  {\n'
                "                public_key.public_bytes(\n"
                "                    encoding=serialization.Encoding.PEM,\n"
                "                    format=serialization.PublicFormat.SubjectPublicKeyInfo,\n"
                "                ).decode('utf-8')!s\n"
                '            },"\n',
                '            f"[Server launch] Public key - decode:  {'
                "public_key.public_bytes(encoding=serialization.Encoding.PEM, "
                "format=serialization.PublicFormat.SubjectPublicKeyInfo)"
                ".decode('utf-8')!s},\"  # backport: PEP 701 f-string\n",
                1,
            ),
        ],
    },
]

MARK = "# backport: "


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def apply(site: pathlib.Path, backport: dict) -> None:
    path = site / backport["file"]
    text = path.read_bytes()
    if MARK.encode() in text:
        sys.exit(f"backport: {path} is already patched (re-create the virtualenv)")
    if sha256(text) != backport["sha256"]:
        sys.exit(
            f"backport: {path} has sha256 {sha256(text)}, expected "
            f"{backport['sha256']} (not supervaizer 1.8.0's file: review the backports)"
        )
    src = text.decode("utf-8")
    for old, new, count in backport["replace"]:
        found = src.count(old)
        if found != count:
            sys.exit(f"backport: {path}: {old[:60]!r} found {found} times, expected {count}")
        src = src.replace(old, new)
    path.write_text(src, encoding="utf-8")


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    site = pathlib.Path(sys.argv[1])
    for backport in BACKPORTS:
        apply(site, backport)
    if not compileall.compile_dir(str(site / "supervaizer"), quiet=1):
        sys.exit("backport: supervaizer still does not compile on this Python")


if __name__ == "__main__":
    main()
