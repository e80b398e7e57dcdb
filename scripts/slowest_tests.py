#!/usr/bin/env python3
"""Prints the N slowest tests of a ctest JUnit report (ctest --output-junit).

    scripts/slowest_tests.py out/ctest-default.xml [N]
"""
import sys
import xml.etree.ElementTree as ET


def main() -> int:
    if len(sys.argv) < 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    root = ET.parse(sys.argv[1]).getroot()
    cases = [(float(c.get("time", "0")), c.get("name", "?")) for c in root.iter("testcase")]
    cases.sort(reverse=True)
    total = sum(t for t, _ in cases)
    print(f"slowest {min(count, len(cases))} of {len(cases)} tests ({total:.0f} s of test time in all):")
    for seconds, name in cases[:count]:
        print(f"  {seconds:7.1f} s  {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
