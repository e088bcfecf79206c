"""Summarises a pytest junit.xml of the Kimi Vendor Verifier's run against
k3 serve (scripts/vendor-verifier.sh): the counts, then every test that
did not pass with its reason, sorted by expected.tsv (fnmatch patterns of
test ids, * and ? the only wildcards; a category and the reason) into those that need a trained
model, the documented differences (docs/K3-API.md) and the unexpected
ones. It exits 1 when any failure is unexpected.

usage: summary.py JUNIT_XML EXPECTED_TSV SUITE_COMMIT
"""

import fnmatch
import sys
import xml.etree.ElementTree as ET

CATEGORIES = {
    "model": "need a trained model's judgment (random weights here)",
    "by-design": "documented differences (docs/K3-API.md)",
}


def test_id(case):
    cls, name = case.get("classname", ""), case.get("name", "")
    path = cls.replace(".", "/") + ".py"
    return f"{path}::{name}"


def first_line(text, limit=240):
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def main():
    junit, expected_path, commit = sys.argv[1:4]
    expected = []
    with open(expected_path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            pattern, category, reason = line.split("\t", 2)
            if category not in CATEGORIES:
                sys.exit(f"{expected_path}: unknown category {category!r}")
            expected.append((pattern, category, reason))

    def classify(tid):
        for pattern, category, reason in expected:
            # Test ids have brackets ([stream]); in a pattern they are
            # literal, only * and ? are wildcards.
            if fnmatch.fnmatchcase(tid, pattern.replace("[", "[[]")):
                return category, reason
        return None, None

    root = ET.parse(junit).getroot()
    passed, failed, skipped = [], [], []
    for case in root.iter("testcase"):
        tid = test_id(case)
        bad = case.find("failure")
        if bad is None:
            bad = case.find("error")
        skip = case.find("skipped")
        if bad is not None:
            failed.append((tid, first_line(bad.get("message") or bad.text)))
        elif skip is not None:
            skipped.append((tid, first_line(skip.get("message") or skip.text)))
        else:
            passed.append(tid)

    total = len(passed) + len(failed) + len(skipped)
    print(f"MoonshotAI/Kimi-Vendor-Verifier {commit}: {total} tests")
    print(f"{len(passed)} passed, {len(failed)} failed, {len(skipped)} skipped")
    by_cat = {c: [] for c in CATEGORIES}
    unexpected = []
    for tid, msg in failed:
        category, reason = classify(tid)
        if category is None:
            unexpected.append((tid, msg))
        else:
            by_cat[category].append((tid, reason, msg))
    for category, title in CATEGORIES.items():
        rows = by_cat[category]
        print(f"\nfailed, {title}: {len(rows)}")
        for tid, reason, msg in sorted(rows):
            print(f"  {tid}\n      why: {reason}\n      got: {msg}")
    print(f"\nfailed, unexpected: {len(unexpected)}")
    for tid, msg in sorted(unexpected):
        print(f"  {tid}\n      got: {msg}")
    print(f"\nskipped by the suite: {len(skipped)}")
    for tid, msg in sorted(skipped):
        print(f"  {tid}: {msg}")
    lucky = [tid for tid in passed if classify(tid)[0] == "model"]
    if lucky:
        print(f"\npassed though listed as needing a trained model (chance on random weights): {len(lucky)}")
        for tid in sorted(lucky):
            print(f"  {tid}")
    sys.exit(1 if unexpected else 0)


if __name__ == "__main__":
    main()
