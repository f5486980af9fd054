"""Print the hashes of the portability BITS cases (integer Monte Carlo and
random numbers) on one device, and compare them with the checked-in ones
(tests/portability_hashes.json).

    python tests/record_portability_hashes.py --device portable        # print, compare
    python tests/record_portability_hashes.py --add                    # all match: add this
                                                                       # device to produced_by
    python tests/record_portability_hashes.py --write muca.global muca.run
        # a kernel's random stream changed on purpose: new hashes for these cases,
        # produced_by reset to this device (every other implementation must confirm)

The device is --device, else CLPHYS_DEVICE, else clphys's default. Exit
status 1 when a hash differs (and nothing is written unless --write).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import clphys  # noqa: E402

from portability_cases import BITS, HASH_FILE, digest, load_hashes, results  # noqa: E402


def describe(dev) -> str:
    f = dev.facts
    return f"{f.platform} {f.driver} | {f.name}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases", nargs="*", help="case names (default: every BITS case)")
    ap.add_argument("--device", help="device spec (default: CLPHYS_DEVICE, then clphys's default)")
    what = ap.add_mutually_exclusive_group()
    what.add_argument("--add", action="store_true",
                      help="if every hash matches, add this device to the file's produced_by")
    what.add_argument("--write", action="store_true",
                      help="store this device's hashes for the named cases; produced_by: this device")
    args = ap.parse_args(argv)
    unknown = [c for c in args.cases if c not in BITS]
    if unknown:
        ap.error(f"unknown cases {unknown}; known: {sorted(BITS)}")
    dev = clphys.device(args.device)
    table = load_hashes()
    print(f"device: {describe(dev)}")
    differ = 0
    mine = {}
    for name in args.cases or sorted(BITS):
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mine[name] = digest(results(name, dev))
        key = BITS[name].same_as or name
        want = table["hashes"].get(key)
        same = mine[name] == want
        differ += not same
        print(f"{name:40s} {mine[name]}  {'same' if same else f'DIFFERS from {want}'}"
              f"  ({time.perf_counter() - t:.1f} s)", flush=True)
    stamp = f"{describe(dev)} ({datetime.date.today().isoformat()})"
    if args.write:
        for name, h in mine.items():
            base = BITS[name].same_as
            if base:
                if h != (mine[base] if base in mine else table["hashes"].get(base)):
                    print(f"{name} must give the bits of {base}: nothing written")
                    return 1
                continue
            table["hashes"][name] = h
        table["produced_by"] = [stamp]
    elif args.add and not differ:
        table["produced_by"].append(stamp)
    if args.write or (args.add and not differ):
        HASH_FILE.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        print(f"written: {HASH_FILE}")
    print(f"{len(mine) - differ} of {len(mine)} hashes match the checked-in ones")
    return 1 if differ and not args.write else 0


if __name__ == "__main__":
    sys.exit(main())
